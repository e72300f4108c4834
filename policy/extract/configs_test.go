package extract

import "testing"

// TestConfigWrite: which writes configWrite finds to change what a tool
// runs.
func TestConfigWrite(t *testing.T) {
	for _, tc := range []struct {
		name      string
		path      string
		recursive bool
		kind      Kind
		want      bool
	}{
		{"cargo config", "/p/.cargo/config.toml", false, KindEdit, true},
		{"cargo config legacy name", "/p/sub/.cargo/config", false, KindEdit, true},
		{"cargo config read", "/p/.cargo/config.toml", false, KindRead, false},
		{"cargo directory whole", "/p/.cargo", true, KindEdit, true},
		{"cargo directory alone", "/p/.cargo", false, KindEdit, false},
		{"project whole", "/p", true, KindEdit, false},
		{"repository whole", "/p/.git", true, KindEdit, false},
		{"hooks whole", "/p/.git/hooks", true, KindEdit, true},
		{"hook", "/p/.git/hooks/pre-commit", false, KindEdit, true},
		{"hook below a hook directory", "/p/.git/hooks/x/y", false, KindEdit, false},
		{"submodule config", "/p/.git/modules/lib/config", false, KindEdit, true},
		{"nested submodule config", "/p/.git/modules/a/modules/b/config", false, KindEdit, true},
		{"submodule directory whole", "/p/.git/modules/lib", true, KindEdit, true},
		{"submodule hook", "/p/.git/modules/lib/hooks/post-checkout", false, KindEdit, true},
		{"worktree config", "/p/.git/worktrees/wt/config.worktree", false, KindEdit, true},
		{"config not below .git", "/p/config", false, KindEdit, false},
		{"config.toml not below .cargo", "/p/config.toml", false, KindEdit, false},
		{"Cargo.toml", "/p/Cargo.toml", false, KindEdit, false},
		{"yarnrc", "/p/.yarnrc.yml", false, KindEdit, true},
		{"pip.conf of a venv", "/p/.venv/pip.conf", false, KindEdit, true},
		{"rust-toolchain.toml", "/p/rust-toolchain.toml", false, KindEdit, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it := Item{Type: ItemPath, Path: tc.path, Forms: []string{tc.path}, Recursive: tc.recursive, kinds: KindBit(tc.kind)}
			if got := configWrite(&it) != ""; got != tc.want {
				t.Errorf("configWrite(%s, recursive %v, %s) = %q, want a reason: %v", tc.path, tc.recursive, tc.kind, configWrite(&it), tc.want)
			}
		})
	}
}
