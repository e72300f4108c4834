package extract

import (
	"path"
	"slices"
	"strings"
)

// toolConfig is a file by which a tool runs, or fetches and then builds,
// what its content names: a write to it decides what a command the policy
// allows later runs, in this command line or a later request.
type toolConfig struct {
	// tail: the last elements of the file's path; * is one element, **
	// any number (none included).
	tail []string
	why  string
}

// toolConfigs are the configuration files of the tools a policy allows
// that name programs they run (or the index they build packages from),
// read from the project: a write to one is not allowable alone (see
// configWrite). The project's code (Makefile, package.json scripts,
// build.rs, go.mod, go.work) is not here: it is what the tools build, as
// visible as any source file, and what runs from it is the project's.
// Each entry is checked against the tool where it is installed here:
//
//   - git reads .git/config, .git/config.worktree (extensions.worktreeConfig,
//     set by git sparse-checkout) and the repository .git/commondir names;
//     a superproject's git status and git diff read each submodule's
//     .git/modules/NAME/config and run its core.fsmonitor (git 2.39,
//     checked); a linked worktree's are .git/worktrees/NAME/*; hooks run
//     on commit, checkout, merge...
//   - cargo reads .cargo/config.toml and .cargo/config in the working
//     directory and every directory above it (build.rustc-wrapper,
//     target.*.runner, target.*.linker; cargo 1.95, checked: the wrapper
//     ran for both names, and from the parent directory).
//   - rustup's cargo and rustc read rust-toolchain.toml (or
//     rust-toolchain) in the working directory and above it: [toolchain]
//     path = DIR runs DIR/bin/cargo (rustup 1.29, checked).
//   - npm (and pnpm, yarn 1) read the project's .npmrc: script-shell runs
//     every script (npm 11, checked), node-options, registry.
//   - yarn reads .yarnrc.yml (yarnPath: the JavaScript file run instead
//     of yarn) and yarn 1 .yarnrc (yarn-path), in the working directory
//     and above it (yarn's documentation; yarn is not installed here).
//   - pip reads the pip.conf of the environment it runs in (a project's
//     .venv/pip.conf: index-url, so the sdists whose builds run; pip 24,
//     checked with pip config debug).
var toolConfigs = []toolConfig{
	{[]string{".git", "config"}, "git's configuration names commands git runs (core.fsmonitor, core.pager, aliases, filters)"},
	{[]string{".git", "config.worktree"}, "git's worktree configuration names commands git runs (core.fsmonitor, core.pager, ...)"},
	{[]string{".git", "commondir"}, "git reads the configuration of the repository .git/commondir names"},
	{[]string{".git", "hooks", "*"}, "git runs its hooks"},
	{[]string{".git", "modules", "**", "config"}, "a submodule's configuration names commands git runs, in the superproject too (git status runs its core.fsmonitor)"},
	{[]string{".git", "modules", "**", "config.worktree"}, "a submodule's worktree configuration names commands git runs"},
	{[]string{".git", "modules", "**", "commondir"}, "git reads the configuration of the repository a submodule's commondir names"},
	{[]string{".git", "modules", "**", "hooks", "*"}, "git runs a submodule's hooks"},
	{[]string{".git", "worktrees", "*", "config.worktree"}, "a linked worktree's configuration names commands git runs"},
	{[]string{".git", "worktrees", "*", "commondir"}, "git reads the configuration of the repository a linked worktree's commondir names"},
	{[]string{".cargo", "config.toml"}, "cargo's configuration names programs cargo runs (build.rustc-wrapper, target.*.runner, a linker)"},
	{[]string{".cargo", "config"}, "cargo's configuration names programs cargo runs (build.rustc-wrapper, target.*.runner, a linker)"},
	{[]string{"rust-toolchain.toml"}, "rustup's toolchain file names the toolchain cargo and rustc run from ([toolchain] path: any directory)"},
	{[]string{"rust-toolchain"}, "rustup's toolchain file names the toolchain cargo and rustc run from ([toolchain] path: any directory)"},
	{[]string{".npmrc"}, "npm's configuration names the shell its scripts run in (script-shell), node-options and the registry"},
	{[]string{".yarnrc.yml"}, "yarn's configuration names the program run instead of yarn (yarnPath)"},
	{[]string{".yarnrc"}, "yarn 1's configuration names the program run instead of yarn (yarn-path)"},
	{[]string{"pip.conf"}, "pip's configuration names the index pip installs from, whose packages' builds run"},
}

// configWrite says why a write to the path item it changes what a tool
// runs ("" when it does not): a form that is one of toolConfigs, or a
// directory written with everything below it in which one can be (.cargo,
// .git/hooks: the config's directory or one between it and the file, but
// not a whole .git).
// Such a write is opaque: what the tool will run is in the file's
// content, which the router does not see. Deny and ask rules still apply.
func configWrite(it *Item) string {
	if it.Type != ItemPath || it.kinds&KindBit(KindEdit) == 0 {
		return ""
	}
	for _, f := range it.Forms {
		elems := strings.Split(strings.TrimPrefix(path.Clean(f), "/"), "/")
		for i := range toolConfigs {
			c := &toolConfigs[i]
			if matchTail(c.tail, elems, false) {
				return "a write to " + f + ": " + c.why
			}
			// (A .git written whole is git's own repository, or one
			// gitRepository sees written: not a config file alone.)
			if it.Recursive && elems[len(elems)-1] != ".git" && matchTail(c.tail, elems, true) {
				return "a write of " + f + " and everything below it, where " + path.Join(c.tail...) + " may be: " + c.why
			}
		}
	}
	return ""
}

// matchTail reports whether pat matches the last elements of elems (at
// least one): * matches one element, ** any number, other elements match
// exactly. With open, elems need only lead to such a path: they are the
// first elements of a path pat matches, and more must follow.
func matchTail(pat, elems []string, open bool) bool {
	for start := len(elems) - 1; start >= 0; start-- {
		if matchElems(pat, elems[start:], open) {
			return true
		}
	}
	return false
}

// matchElems reports whether pat matches elems exactly, or with open
// whether elems are a proper leading part of what it matches.
func matchElems(pat, elems []string, open bool) bool {
	for len(elems) > 0 {
		if len(pat) == 0 {
			return false
		}
		switch pat[0] {
		case "**":
			return matchElems(pat[1:], elems, open) || matchElems(pat, elems[1:], open)
		case "*":
		default:
			if elems[0] != pat[0] {
				return false
			}
		}
		pat, elems = pat[1:], elems[1:]
	}
	if open {
		return slices.ContainsFunc(pat, func(e string) bool { return e != "**" })
	}
	return !slices.ContainsFunc(pat, func(e string) bool { return e != "**" })
}
