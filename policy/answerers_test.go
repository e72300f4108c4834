package policy

import (
	"strings"
	"testing"
)

// TestAnsweredByExplain: explain says who may answer an ask and why, and
// what the agent gets when no one may; the policy's hash changes with
// answered_by (it changes the decision) and not for rules without it.
func TestAnsweredByExplain(t *testing.T) {
	const rules = `
rules:
  - {id: push, decision: ask, when: {command: ["git push **"]}, answered_by: [lead, editor]}
  - {id: rm, decision: ask, when: {command: ["rm **"]}, answered_by: [alice]}
  - {id: tmp, decision: ask, when: {paths: ["${cwd}/tmp/**"]}, answered_by: [bob]}
`
	p := mustCompile(t, mustParse(t, "org.yaml", rules))
	d := p.Decide(terminal("git push origin main"))
	text := Explain(&d)
	for _, want := range []string{
		"decision: ASK   by push (org layer)",
		"answered: only by editor, lead   (answered_by of rule push (org layer))",
		"only editor, lead may answer (an answer from another client is taken as a reject)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("explain lacks %q:\n%s", want, text)
		}
	}
	d = p.Decide(terminal("rm -rf tmp/x"))
	text = Explain(&d)
	for _, want := range []string{
		"answered: by no one: the answered_by of rules rm, tmp (org layer) name no one in common, so the ask is refused",
		"answer:   refused at once as if rejected (no one may answer)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("explain lacks %q:\n%s", want, text)
		}
	}
	d = p.Decide(terminal("ls"))
	if d.Answerers != nil || strings.Contains(Explain(&d), "answered:") {
		t.Errorf("an ask no answered_by rule fired on names answerers: %+v", d.Answerers)
	}

	without := mustCompile(t, mustParse(t, "org.yaml", strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(rules,
		", answered_by: [lead, editor]", ""), ", answered_by: [alice]", ""), ", answered_by: [bob]", "")))
	other := mustCompile(t, mustParse(t, "org.yaml", strings.Replace(rules, "[lead, editor]", "[lead]", 1)))
	reordered := mustCompile(t, mustParse(t, "org.yaml", strings.Replace(rules, "[lead, editor]", "[editor, lead]", 1)))
	if p.Hash() == without.Hash() || p.Hash() == other.Hash() {
		t.Error("the policy hash does not change with answered_by")
	}
	if p.Hash() != reordered.Hash() {
		t.Error("the policy hash changes with the order of answered_by's names")
	}
}

// TestAnswerersAllows: "editor" is the stdio editor only, never a client
// whose token is named editor; a name matches only a client, never the
// editor; nil allows everyone and an empty list no one.
func TestAnswerersAllows(t *testing.T) {
	a := &Answerers{Names: []string{"editor", "lead"}}
	for _, tc := range []struct {
		name   string
		editor bool
		want   bool
	}{
		{"editor", true, true},
		{"lead", true, true}, // the editor, whatever name it is given
		{"editor", false, false},
		{"lead", false, true},
		{"bob", false, false},
		{"", false, false},
	} {
		if got := a.Allows(tc.name, tc.editor); got != tc.want {
			t.Errorf("Allows(%q, %v) = %v, want %v", tc.name, tc.editor, got, tc.want)
		}
	}
	if (&Answerers{Names: []string{"lead"}}).Allows("editor", true) {
		t.Error("the editor may answer an ask only lead may answer")
	}
	if (&Answerers{}).Allows("lead", false) || (&Answerers{}).Allows("", true) {
		t.Error("an empty list allows someone")
	}
	var none *Answerers
	if !none.Allows("anyone", false) || !none.Allows("", true) {
		t.Error("nil does not allow everyone")
	}
}
