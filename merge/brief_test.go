package merge

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBrief(t *testing.T) {
	turns := []TurnRecord{
		{Seq: 0, Agent: "a", Title: "Alpha", User: "first", Reply: "one", Tools: []ToolRecord{{Title: "Read x", Status: "completed"}}},
		{Seq: 1, Agent: "b", Title: "Beta", User: "second", Reply: "two"},
		{Seq: 2, Agent: "a", Title: "Alpha", User: "third", Reply: "three"},
		{Seq: 3, Agent: "b", Title: "Beta", User: "fourth", Reply: "four"},
	}
	t.Run("only turns since the agent last took part", func(t *testing.T) {
		got := Brief(turns, 3, 1<<20)
		want := BriefHeader + "\n\n--- Beta ---\nUser: fourth\nBeta: four"
		if got != want {
			t.Errorf("A→B→A brief:\n%q\nwant\n%q", got, want)
		}
	})
	t.Run("a new agent hears everything", func(t *testing.T) {
		got := Brief(turns, 0, 1<<20)
		for _, s := range []string{"User: first", "Tool: Read x (completed)", "Alpha: one", "User: fourth"} {
			if !strings.Contains(got, s) {
				t.Errorf("brief lacks %q:\n%s", s, got)
			}
		}
		if strings.Index(got, "first") > strings.Index(got, "fourth") {
			t.Errorf("brief not oldest first")
		}
	})
	t.Run("nothing new", func(t *testing.T) {
		if got := Brief(turns, 4, 1<<20); got != "" {
			t.Errorf("brief %q, want none", got)
		}
	})
	t.Run("bounded: oldest whole turns dropped", func(t *testing.T) {
		full := Brief(turns, 0, 1<<20)
		max := len(full) - 5
		got := Brief(turns, 0, max)
		if len(got) > max {
			t.Fatalf("brief of %d bytes over the bound %d", len(got), max)
		}
		if strings.Contains(got, "User: first") || !strings.Contains(got, "User: fourth\nBeta: four") {
			t.Errorf("trimmed brief %q: want the oldest turn dropped whole, the newest kept", got)
		}
	})
	t.Run("one huge turn is cut UTF-8 safely", func(t *testing.T) {
		huge := []TurnRecord{{Seq: 0, Agent: "a", Title: "Alpha", User: "q", Reply: strings.Repeat("é", 5000)}}
		for max := len(BriefHeader) + 20; max < len(BriefHeader)+40; max++ {
			got := Brief(huge, 0, max)
			if len(got) > max || !utf8.ValidString(got) || !strings.HasPrefix(got, BriefHeader) {
				t.Fatalf("max %d: brief of %d bytes, valid UTF-8 %v", max, len(got), utf8.ValidString(got))
			}
		}
	})
}

func TestCapped(t *testing.T) {
	c := Capped{Max: 5}
	c.WriteString("ab")
	c.WriteString("cdé") // é would cross the bound
	c.WriteString("more")
	if got := c.String(); got != "abcd" {
		t.Errorf("Capped = %q, want %q", got, "abcd")
	}
}

func TestSumCost(t *testing.T) {
	if got := SumCost([]Cost{{1.5, "USD"}, {2, "USD"}}); got == nil || *got != (Cost{3.5, "USD"}) {
		t.Errorf("sum = %v", got)
	}
	if got := SumCost([]Cost{{1.5, "USD"}, {2, "EUR"}}); got != nil {
		t.Errorf("mixed currencies summed: %v", got)
	}
	if got := SumCost(nil); got != nil {
		t.Errorf("no costs: %v", got)
	}
}
