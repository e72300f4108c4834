package acp

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSandboxSatisfies pins the draft RFD's predicate and the reading of
// the acp.sandbox value: a value id or a SandboxPolicy object; the minimum
// grades apply whatever require says; anything unknown is refused.
func TestSandboxSatisfies(t *testing.T) {
	custom := SandboxCapability{Mode: SandboxModeCustom, Guarantees: SandboxGuarantees{FsIsolation: "workspace", NetIsolation: "none", ProcessCaps: true}}
	host := HostSandbox()
	for _, tc := range []struct {
		value string
		cap   SandboxCapability
		ok    bool
		bad   string // a parse error containing this
	}{
		{value: `"any"`, cap: host, ok: true},
		{value: `"any"`, cap: custom, ok: true},
		{value: `"sandboxed"`, cap: host, ok: false},
		{value: `"sandboxed"`, cap: custom, ok: true},
		{value: `"host"`, cap: host, ok: true},
		{value: `"host"`, cap: custom, ok: false},
		{value: `{"require":"sandboxed","minFsIsolation":"workspace"}`, cap: custom, ok: true},
		{value: `{"require":"sandboxed","minFsIsolation":"fullRoot"}`, cap: custom, ok: false},
		{value: `{"require":"sandboxed","minNetIsolation":"restricted"}`, cap: custom, ok: false},
		{value: `{"require":"any","minFsIsolation":"workspace"}`, cap: host, ok: false},
		{value: `{"require":"sandboxed","image":"ubuntu","setupCommand":"true"}`, cap: custom, ok: true},
		{value: `{"require":"sandboxed","minFsIsolation":"none"}`, bad: "minFsIsolation"},
		{value: `{"require":"sandboxed","minNetIsolation":"open"}`, bad: "minNetIsolation"},
		{value: `{"require":"sandboxed","strict":true}`, bad: "unknown field"},
		{value: `"yes"`, bad: "want any, host or sandboxed"},
		{value: `true`, bad: "SandboxPolicy"},
		{value: `{}`, bad: "require"},
	} {
		pol, err := ParseSandboxPolicy(json.RawMessage(tc.value))
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%s: error %v, want one naming %q", tc.value, err, tc.bad)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.value, err)
			continue
		}
		if ok, why := Satisfies(tc.cap, pol); ok != tc.ok || ok == (why != "") {
			t.Errorf("Satisfies(%s, %s) = %v %q, want %v", tc.cap.Mode, tc.value, ok, why, tc.ok)
		}
	}
	e := UnsatisfiableError(host, "why")
	b, _ := json.Marshal(e)
	if e.Code != CodeInvalidParams || !strings.HasPrefix(e.Message, SandboxUnsatisfiable) ||
		!strings.Contains(string(b), `"data":{"code":"sandbox_policy_unsatisfiable","reason":"why","sandbox":{"mode":"host","guarantees":{"fsIsolation":"none","netIsolation":"none","processCaps":false}}}`) {
		t.Errorf("UnsatisfiableError: %s", b)
	}
}
