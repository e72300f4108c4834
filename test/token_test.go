package test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/token"
)

// TestTokenCommands pins `acp-router token create|list|revoke` (issue 30,
// "Authentication") on the real binary: create prints the secret alone on
// stdout (so that it can be captured) and never elsewhere, the router's
// token store accepts it with the role and scope asked for, the file holds
// its SHA-256 only, at mode 0600; list shows names, roles and scopes, never
// a secret or digest; a duplicate name, an unknown name to revoke and a bad
// name fail; a revoked token is refused. (Each subcommand's help: TestSubcommandHelp.)
func TestTokenCommands(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	cfg := writeConfig(t, "version: 1\nstate_dir: "+yamlQuote(state)+"\nagents:\n"+fakeAgentYAML("alpha", fakeOpts{}))
	run := func(args ...string) (int, string, string) {
		t.Helper()
		return runRouterCmd(t, nil, append(args, "--config", cfg, "--log-level", "trace")...)
	}

	code, out, errOut := run("token", "create", "phone", "--role", "observer", "--own")
	if code != 0 || !regexp.MustCompile(`^acpr_[A-Za-z0-9_-]{43}\n$`).MatchString(out) {
		t.Fatalf("token create: exit %d, stdout %q (want the secret alone), stderr:\n%s", code, out, errOut)
	}
	secret := strings.TrimSuffix(out, "\n")
	if !strings.Contains(errOut, "only this once") || strings.Contains(errOut, secret[5:20]) {
		t.Errorf("token create's note on stderr lacks \"only this once\" or holds the secret:\n%s", errOut)
	}
	code, lead, _ := run("token", "create", "lead")
	if code != 0 {
		t.Fatalf("token create lead: exit %d", code)
	}
	lead = strings.TrimSpace(lead)

	s, err := token.Open(state, token.Options{})
	if err != nil {
		t.Fatal(err)
	}
	auth := func(secret string) (token.Identity, error) {
		r := httptest.NewRequest(http.MethodPost, "/acp", nil)
		r.Header.Set("Authorization", "Bearer "+secret)
		return s.Authenticate(r)
	}
	if id, err := auth(secret); err != nil || id.ID == "" || id != (token.Identity{Name: "phone", Role: token.RoleObserver, AllSessions: false, ID: id.ID}) {
		t.Errorf("the created token authenticates as %+v, %v; want phone, observer, own sessions", id, err)
	}
	if id, err := auth(lead); err != nil || id.ID == "" || id != (token.Identity{Name: "lead", Role: token.RoleController, AllSessions: true, ID: id.ID}) {
		t.Errorf("a token created with no flags authenticates as %+v, %v; want a controller seeing every session", id, err)
	}

	file := filepath.Join(state, "tokens", "tokens.json")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(secret))
	if strings.Contains(string(b), secret[5:]) || !strings.Contains(string(b), hex.EncodeToString(sum[:])) {
		t.Errorf("%s holds the secret, or not its SHA-256:\n%s", file, b)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode() != 0o600 {
		t.Errorf("%s: %v, %v; want mode 0600", file, fi.Mode(), err)
	}

	code, out, errOut = run("token", "list")
	if code != 0 || !regexp.MustCompile(`(?m)^phone +observer +own `).MatchString(out) || !regexp.MustCompile(`(?m)^lead +controller +all `).MatchString(out) {
		t.Errorf("token list: exit %d\n%s%s", code, out, errOut)
	}
	if strings.Contains(out+errOut, secret[5:20]) || strings.Contains(out+errOut, hex.EncodeToString(sum[:])[:16]) {
		t.Errorf("token list shows a secret or a digest:\n%s%s", out, errOut)
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"token", "create", "phone"}, 1, "exists"},
		{[]string{"token", "create", "two words"}, 2, "bad name"},
		{[]string{"token", "create", "editor"}, 2, "reserved"},
		{[]string{"token", "create", "x", "--role", "admin"}, 2, "controller or observer"},
		{[]string{"token", "create"}, 2, "usage: acp-router token create"},
		{[]string{"token", "revoke", "nobody"}, 1, "no such token"},
		{[]string{"token", "frobnicate"}, 2, "unknown token command"},
	} {
		code, out, errOut := run(c.args...)
		if code != c.code || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, nothing on stdout, %q", c.args, code, out, errOut, c.code, c.want)
		}
	}

	if code, _, errOut := run("token", "revoke", "phone"); code != 0 {
		t.Fatalf("token revoke: exit %d: %s", code, errOut)
	}
	if _, err := auth(secret); !errors.Is(err, token.ErrUnauthorized) {
		t.Errorf("a revoked token authenticates: %v", err)
	}
	if _, out, _ := run("token", "list"); strings.Contains(out, "phone") {
		t.Errorf("token list after revoke still lists phone:\n%s", out)
	}

	if code, out, _ := runRouterCmd(t, nil, "help", "token"); code != 0 || !strings.Contains(out, "acp-router token revoke") {
		t.Errorf("help token: exit %d\n%s", code, out)
	}
}
