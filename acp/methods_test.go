package acp

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// schemaMethod is one method of the schema files, as x-method and x-side
// annotate its request or notification type.
type schemaMethod struct {
	name, side   string
	request      bool // else a notification
	stable       bool // in schema.json
	definedBy    string
	unstableOnly bool
}

// schemaMethods reads testdata/schema/*.json (copies of shared/acp/: the
// newest schema files obtainable, see VERSION.txt there).
func schemaMethods(t *testing.T) []schemaMethod {
	t.Helper()
	stable := map[string]bool{}
	var out []schemaMethod
	for _, file := range []string{"schema.json", "schema.unstable.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "schema", file))
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Defs map[string]struct {
				Method string `json:"x-method"`
				Side   string `json:"x-side"`
			} `json:"$defs"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for name, d := range s.Defs {
			if d.Method == "" {
				continue
			}
			var request bool
			switch {
			case strings.HasSuffix(name, "Request"):
				request = true
			case strings.HasSuffix(name, "Notification"):
			case strings.HasSuffix(name, "Response"):
				continue
			default:
				t.Fatalf("%s: %s has x-method %s but is no request, notification or response", file, name, d.Method)
			}
			key := d.Method + " " + d.Side + " " + fmt.Sprint(request)
			if file == "schema.json" {
				stable[key] = true
			}
			out = append(out, schemaMethod{name: d.Method, side: d.Side, request: request, stable: file == "schema.json",
				definedBy: file + " " + name, unstableOnly: file != "schema.json" && !stable[key]})
		}
	}
	if len(out) == 0 {
		t.Fatal("no x-method in the schema files")
	}
	return out
}

func row(name string, side Side) *Method {
	for i := range Methods {
		if Methods[i].Name == name && Methods[i].Side == side {
			return &Methods[i]
		}
	}
	return nil
}

// TestMethodTableCoversSchema fails for every method of the schema files
// (both directions, stable and unstable) without a row in the protocol
// table, or whose row says otherwise than the schema how it is sent or how
// stable it is: after a schema update its failures are the work list.
func TestMethodTableCoversSchema(t *testing.T) {
	var missing []string
	for _, sm := range schemaMethods(t) {
		m := row(sm.name, Side(sm.side))
		if m == nil {
			missing = append(missing, fmt.Sprintf("%s (x-side %s, %s)", sm.name, sm.side, sm.definedBy))
			continue
		}
		if sm.request && !m.Request || !sm.request && !m.Notification {
			t.Errorf("%s %s: the schema sends it as a %s (%s); the row says request=%v notification=%v",
				sm.name, sm.side, map[bool]string{true: "request", false: "notification"}[sm.request], sm.definedBy, m.Request, m.Notification)
		}
		if sm.stable && m.Status != Stable {
			t.Errorf("%s %s: stable in schema.json, the row says %s", sm.name, sm.side, m.Status)
		}
		if sm.unstableOnly && m.Status != Unstable {
			t.Errorf("%s %s: only in schema.unstable.json, the row says %s", sm.name, sm.side, m.Status)
		}
	}
	sort.Strings(missing)
	missing = slices.Compact(missing)
	for _, m := range missing {
		t.Errorf("no treatment for %s: add a row to acp.Methods saying what the router does with it", m)
	}

	// methods.derived.json: every method and side it names.
	b, err := os.ReadFile(filepath.Join("testdata", "schema", "methods.derived.json"))
	if err != nil {
		t.Fatal(err)
	}
	var derived map[string]json.RawMessage
	if err := json.Unmarshal(b, &derived); err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"stable", "unstable"} {
		var sides map[string][]string
		if err := json.Unmarshal(derived[part], &sides); err != nil || len(sides) == 0 {
			t.Fatalf("methods.derived.json %s: %v", part, err)
		}
		for name, ss := range sides {
			for _, side := range ss {
				if row(name, Side(side)) == nil {
					t.Errorf("methods.derived.json (%s): no treatment for %s (side %s)", part, name, side)
				}
			}
		}
	}
}

// TestMethodTableRows checks each row on its own: a row the schema files
// do not have is one the router meets anyway (legacy, removed, announced),
// and every row says what happens, by which code, with which error, and
// until when.
func TestMethodTableRows(t *testing.T) {
	inSchema := map[string]bool{}
	for _, sm := range schemaMethods(t) {
		inSchema[sm.name+" "+sm.side] = true
	}
	seen := map[string]bool{}
	for _, m := range Methods {
		key := m.Name + " " + string(m.Side)
		t.Run(key, func(t *testing.T) {
			if seen[key] {
				t.Errorf("two rows")
			}
			seen[key] = true
			switch m.Status {
			case Stable, Unstable:
				if !inSchema[key] {
					t.Errorf("status %s, but the schema files do not have it: legacy, removed or announced?", m.Status)
				}
			case Legacy, Removed, Announced:
				if inSchema[key] {
					t.Errorf("status %s, but the schema files have it", m.Status)
				}
			default:
				t.Errorf("no status")
			}
			if !m.Request && !m.Notification {
				t.Errorf("neither a request nor a notification")
			}
			if m.Why == "" {
				t.Errorf("no why")
			}
			check := func(what string, tr Treatment) {
				switch tr {
				case Handled:
					if m.Handler == "" {
						t.Errorf("%s: handled, by no named code", what)
					}
				case Refused:
					if m.Code == 0 {
						t.Errorf("%s: refused with no error code", what)
					}
				case RoutedBySession, Unknown:
					if m.Side == SideClient {
						t.Errorf("%s: %s is for what the editor sends", what, tr)
					}
				case Relayed:
					if m.Side != SideClient {
						t.Errorf("%s: relayed is for what an agent sends", what)
					}
				default:
					t.Errorf("%s: no treatment", what)
				}
			}
			check("treatment", m.Treatment)
		})
	}
}

// TestLookupMethod pins the directions: an agent's call is looked up
// among the client side, the editor's among the agent side; the proxy and
// protocol methods either way; NES is deliberately forwarded.
func TestLookupMethod(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fromAgent bool
		want      Treatment
		ok        bool
	}{
		{"session/prompt", false, Handled, true},
		{"session/prompt", true, 0, false},
		{"session/set_model", false, RoutedBySession, true},
		{"fs/read_text_file", true, Relayed, true},
		{"fs/read_text_file", false, 0, false},
		{"mcp/message", true, Relayed, true},
		{"mcp/message", false, Handled, true}, // routed by serverId
		{"proxy/initialize", false, Handled, true},
		{"$/cancel_request", true, Handled, true},
		{"nes/suggest", false, Unknown, true},
		{"document/didOpen", true, Relayed, true},
		{"_zed/anything", false, 0, false},
	} {
		m, ok := LookupMethod(tc.name, tc.fromAgent)
		if ok != tc.ok || (ok && m.Treatment != tc.want) {
			t.Errorf("LookupMethod(%q, fromAgent=%v) = %v %v, want %v %v", tc.name, tc.fromAgent, m.Treatment, ok, tc.want, tc.ok)
		}
	}
}
