package router

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acp-router/acp-router/config"
)

// TestMostSevereStop pins the order a comparison's stop reason is chosen
// by: refusal > max_tokens, max_turn_requests > cancelled > end_turn, a
// reason the table does not know as end_turn, the first of equals.
func TestMostSevereStop(t *testing.T) {
	for _, c := range []struct {
		stops []string
		want  string
	}{
		{[]string{"end_turn", "end_turn"}, "end_turn"},
		{[]string{"end_turn", "cancelled"}, "cancelled"},
		{[]string{"cancelled", "max_tokens"}, "max_tokens"},
		{[]string{"max_turn_requests", "cancelled", "end_turn"}, "max_turn_requests"},
		{[]string{"max_tokens", "max_turn_requests"}, "max_tokens"},
		{[]string{"max_turn_requests", "max_tokens"}, "max_turn_requests"},
		{[]string{"max_tokens", "refusal", "cancelled"}, "refusal"},
		{[]string{"refusal", "end_turn"}, "refusal"},
		{[]string{"_custom", "end_turn"}, "_custom"},
		{[]string{"end_turn", "_custom"}, "end_turn"},
		{[]string{"_custom", "cancelled"}, "cancelled"},
	} {
		if got := mostSevere(c.stops); got != c.want {
			t.Errorf("mostSevere(%q) = %q, want %q", c.stops, got, c.want)
		}
	}
}

// TestParseCompareArgs: /compare's agents lead its text, then the prompt
// (newlines kept); a misspelt agent before another agent, one named
// twice, a single agent, more than compare.max_agents, or nothing to ask
// are refused with a message naming the fault; without names the config's
// default set is asked.
func TestParseCompareArgs(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	yaml := "version: 1\nagents:\n"
	for _, n := range []string{"alpha", "beta", "gamma"} {
		yaml += fmt.Sprintf("  - {name: %s, command: '%s'}\n", n, bin)
	}
	parse := func(extra string) *Router {
		cfg, err := config.Parse("c.yaml", []byte(yaml+extra), os.LookupEnv)
		if err != nil {
			t.Fatal(err)
		}
		return New(cfg, Options{})
	}
	r := parse("compare: {max_agents: 2}\n")
	withDefault := parse("compare: {default: [gamma, alpha]}\n")
	for _, c := range []struct {
		r      *Router
		rest   string
		agents []string
		prompt string
		msgHas string
	}{
		{r, "alpha beta fix the bug", []string{"alpha", "beta"}, "fix the bug", ""},
		{r, "alpha  beta\tsay a\nsay b", []string{"alpha", "beta"}, "say a\nsay b", ""},
		{r, "alpha beta\nsay a", []string{"alpha", "beta"}, "say a", ""},
		{r, "alpha gamme beta fix", nil, "", `No agent "gamme"`},
		{r, "alph beta fix", nil, "", `No agent "alph"`},
		{r, "alpha xyz beta fix", nil, "", `No agent "xyz"`},
		{r, "alpha beta on alpha fix", []string{"alpha", "beta"}, "on alpha fix", ""},
		{withDefault, "ask alpha why", []string{"gamma", "alpha"}, "ask alpha why", ""},
		{withDefault, "gama alpha fix", nil, "", `No agent "gama"`},
		{r, "alpha alpha fix", nil, "", "alpha is named twice"},
		{r, "alpha fix it", nil, "", "needs at least two agents, got only alpha"},
		{r, "alpha beta gamma fix", nil, "", "At most 2 agents"},
		{r, "alpha beta", nil, "", "Usage: /compare"},
		{r, "fix the bug", nil, "", "Set compare.default"},
		{withDefault, "fix the bug", []string{"gamma", "alpha"}, "fix the bug", ""},
		{withDefault, "alpha beta gamma fix", []string{"alpha", "beta", "gamma"}, "fix", ""},
	} {
		agents, prompt, msg := c.r.parseCompare(c.rest)
		if !slices.Equal(agents, c.agents) || prompt != c.prompt || (c.msgHas == "") != (msg == "") || !strings.Contains(msg, c.msgHas) {
			t.Errorf("/compare %q: agents %q prompt %q message %q; want %q %q %q", c.rest, agents, prompt, msg, c.agents, c.prompt, c.msgHas)
		}
	}
}

// TestCompareFloor pins how a comparison's lines reach the editor, on a
// session not open yet (its lines are held, in order, as the editor would
// get them): the first to speak streams; another's lines wait, whole, and
// are shown headed when the floor passes — at once when what waits passes
// compareHeldMax, or when the holder has been silent for compareFloorIdle.
func TestCompareFloor(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("c.yaml", []byte(fmt.Sprintf("version: 1\nagents:\n  - {name: alpha, command: '%s'}\n  - {name: beta, command: '%s'}\n", bin, bin)), os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	r := New(cfg, Options{})
	s := &Session{r: r, ID: "s"}
	a, b := &leg{agent: r.byName["alpha"], name: "alpha"}, &leg{agent: r.byName["beta"], name: "beta"}
	c := &comparison{legs: []*leg{a, b}}
	s.cmp = c
	say := func(l *leg, text string) {
		r.emitLocked(s, c, l, "agent_message_chunk", func() []byte {
			return s.updateLine(map[string]any{"sessionUpdate": "agent_message_chunk", "messageId": l.msgID,
				"content": map[string]string{"type": "text", "text": text}})
		})
	}
	shown := func() []string {
		var out []string
		for _, line := range s.held {
			var u struct {
				Params struct {
					Update struct {
						MessageID string `json:"messageId"`
						Content   struct{ Text string }
					}
				}
			}
			json.Unmarshal(line, &u)
			text := strings.TrimSpace(u.Params.Update.Content.Text)
			if len(text) > 20 {
				text = text[:20]
			}
			out = append(out, text)
		}
		s.held = nil
		return out
	}
	big := strings.Repeat("b", 64<<10)
	say(a, "a1")
	for range compareHeldMax/len(big) - 1 {
		say(b, big)
	}
	if got := shown(); !slices.Equal(got, []string{"**alpha**", "a1"}) {
		t.Fatalf("with beta's lines under the bound: %q", got)
	}
	say(b, big) // over compareHeldMax: shown at once
	got := shown()
	if len(got) != compareHeldMax/len(big)+1 || got[0] != "**beta**" {
		t.Fatalf("past the bound the editor got %d lines starting %q", len(got), got[:2])
	}
	say(a, "a2") // beta holds the floor now
	if got := shown(); len(got) != 0 {
		t.Fatalf("alpha's line was shown while beta holds the floor: %q", got)
	}
	c.floorAt = time.Now().Add(-compareFloorIdle) // beta silent since
	say(a, "a3")
	if got := shown(); !slices.Equal(got, []string{"**alpha**", "a2", "a3"}) {
		t.Fatalf("after beta's silence: %q", got)
	}
	b.done = true
	r.passFloorLocked(s, c, nil)
	if c.floor != nil {
		t.Errorf("the floor stayed with %s", c.floor.name)
	}
}
