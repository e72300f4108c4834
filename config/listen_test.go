package config

import (
	"os"
	"strings"
	"testing"
)

// TestListenConfig: listen: is read (address, tls files with ~ expanded)
// and its mistakes are errors at file:line:col.
func TestListenConfig(t *testing.T) {
	bin := fakeBin(t, fakeAgents...)
	base := "version: 1\nagents:\n  - name: claude\n    command: claude-agent-acp\n"
	cfg, err := Parse("c.yaml", []byte(base+"listen:\n  address: 0.0.0.0:7420\n  tls: {cert: ~/c.pem, key: /k.pem}\n"), testEnv(bin, nil))
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.Listen; l.Address != "0.0.0.0:7420" || l.TLSCert != "/home/u/c.pem" || l.TLSKey != "/k.pem" {
		t.Errorf("listen = %+v", l)
	}
	if cfg.Keys()["listen"] == "" {
		t.Error("listen is not in the config's fingerprint: check would not say restart to apply")
	}
	for _, tc := range []struct{ yaml, want string }{
		{"listen:\n  address: 7420\n", "c.yaml:6:12: listen.address: expected host:port"},
		{"listen:\n  tls: {cert: /c.pem, key: /k.pem}\n", `missing required key "address"`},
		{"listen:\n  address: :0\n  tls: {cert: /c.pem}\n", `listen.tls: missing required key "key"`},
		{"listen:\n  address: :0\n  port: 1\n", `unknown key "port"`},
	} {
		_, err := Parse("c.yaml", []byte(base+tc.yaml), testEnv(bin, nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// TestListeningRecords: each listening router's record is found by pid,
// a dead router's is removed.
func TestListeningRecords(t *testing.T) {
	dir := t.TempDir()
	if err := WriteListening(dir, Listening{URL: "http://127.0.0.1:40001/acp", File: "/c.yaml", Stdio: true}); err != nil {
		t.Fatal(err)
	}
	// A record of a process that is gone (pid 2^22+1 is above pid_max).
	stale := listeningPath(dir, 1<<22+1)
	if err := os.WriteFile(stale, []byte(`{"pid":4194305,"url":"http://127.0.0.1:1/acp"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadListening(dir)
	if err != nil || len(got) != 1 || got[0].PID != os.Getpid() || got[0].URL != "http://127.0.0.1:40001/acp" || !got[0].Stdio {
		t.Fatalf("ReadListening = %+v, %v", got, err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead router's record is still there: %v", err)
	}
	RemoveListening(dir)
	if got, _ := ReadListening(dir); len(got) != 0 {
		t.Errorf("after RemoveListening: %+v", got)
	}
}

// TestSessionsConfig: sessions.on_last_detach is read (finish by default,
// cancel), in the fingerprint, and a wrong value is an error.
func TestSessionsConfig(t *testing.T) {
	bin := fakeBin(t, fakeAgents...)
	base := "version: 1\nagents:\n  - name: claude\n    command: claude-agent-acp\n"
	for _, tc := range []struct {
		yaml   string
		cancel bool
	}{{"", false}, {"sessions: {on_last_detach: finish}\n", false}, {"sessions: {on_last_detach: cancel}\n", true}} {
		cfg, err := Parse("c.yaml", []byte(base+tc.yaml), testEnv(bin, nil))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Sessions.CancelOnLastDetach != tc.cancel {
			t.Errorf("%q: CancelOnLastDetach = %v", tc.yaml, cfg.Sessions.CancelOnLastDetach)
		}
	}
	_, err := Parse("c.yaml", []byte(base+"sessions: {on_last_detach: stop}\n"), testEnv(bin, nil))
	if err == nil || !strings.Contains(err.Error(), `sessions.on_last_detach: must be "finish" or "cancel"`) {
		t.Errorf("a wrong on_last_detach: %v", err)
	}
}
