package hub

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

var editorID = Identity{Name: "editor", Role: RoleController, AllSessions: true, Editor: true}

// TestOneClient: one client through the hub is served as the Router serves
// an editor: initialize (with the attach capability added), session/new,
// a prompt whose updates stream in order, and a permission request the
// client answers.
func TestOneClient(t *testing.T) {
	e := startHub(t, Options{})
	c := e.connect(editorID)
	var init struct {
		AgentCapabilities struct {
			SessionCapabilities struct {
				Attach struct {
					Roles []string `json:"roles"`
				} `json:"attach"`
			} `json:"sessionCapabilities"`
		} `json:"agentCapabilities"`
	}
	json.Unmarshal(c.initialize(), &init)
	if got := init.AgentCapabilities.SessionCapabilities.Attach.Roles; !slices.Equal(got, []string{"controller", "observer"}) {
		t.Errorf("attach roles advertised = %q", got)
	}
	sid := c.newSession()
	done := c.start("session/prompt", promptParams(sid, "say one\nsay two\npermission t1\nsay three"))
	req := c.request()
	if req.Method != "session/request_permission" {
		t.Fatalf("request = %s", req.Method)
	}
	c.answer(req.ID, allow("allow"))
	res := <-done
	if res.Error != nil || !strings.Contains(string(res.Result), "end_turn") {
		t.Fatalf("prompt answer = %s", res.raw)
	}
	want := []string{"one", "two", "permission t1: allow", "three"}
	if got := c.texts(sid); !slices.Equal(got, want) {
		t.Errorf("chunks = %q, want %q", got, want)
	}
}
