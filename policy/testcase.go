package policy

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/acp-router/acp-router/acp"
	"github.com/acp-router/acp-router/policy/extract"
	"github.com/acp-router/acp-router/yamlpos"
	"github.com/bmatcuk/doublestar/v4"
	"mvdan.cc/sh/v3/syntax"
)

// TestCase is one entry of a layer's tests:
//
//	tests:
//	  - call: "fs/read_text_file ${cwd}/.env"  # or a list of calls, or {method: M, params: {...}}
//	    expect: deny                            # allow | ask | deny
//	    rule: no-secrets                        # optional: the rule that must decide (see below)
//	    answered_by: [lead]                     # optional, with expect: ask: who may answer (answerers.go)
//	    agent: claude                           # optional session context
//	    mode: default
//	    cwd: /home/user/project                 # default /home/user/project
//	    roots: [/home/user/lib]                 # additional directories
//	    files: [/home/user/project/.env]        # paths that exist (a trailing / makes a directory)
//	    symlinks: {/home/user/project/link: /home/user/.ssh}
//
// A list of calls states that every call gets the same decision (useful
// for spellings of one request). rule: must name a rule in force in the
// test's layer or a layer above it, or a built-in safeguard (RuleOpaque,
// ...); any other id fails every call of the test with that error,
// whatever the decision. A test that names a rule of its own layer also
// passes when that rule fires with the expected decision but a rule of a
// layer above, with the same decision, decides first (the user layer
// repeats what the org enforces): the result says so in its Note.
// answered_by: states who may answer the ask, exactly (in any order); a
// test without it says nothing of who answers.
type TestCase struct {
	Pos        yamlpos.Pos
	Layer      string
	Calls      []*TestCall
	Expect     Effect
	Rule       string
	AnsweredBy []string
	Agent      string
	Mode       string
	Cwd        string
	Roots      []string
	Files      []string
	Symlinks   map[string]string
	// budget is a budget test's (prompt:); nil for a call's.
	budget *budgetTest
}

// TestCall is one call of a test. The string form is "METHOD ARGS...":
//
//	fs/read_text_file PATH
//	fs/write_text_file PATH
//	terminal/create COMMAND LINE...          (parsed as a shell command line)
//	session/request_permission KIND [ARG...]
//	acp-router/agent AGENT                   (a router command: the agent it is about)
//	acp-router/turn AGENT
//	acp-router/compare AGENT AGENT...
//	acp-router/pick AGENT
//
// The mapping form is {method: METHOD, params: {...}, updates: [...]}:
// params as sent, and for session/request_permission the tool_call and
// tool_call_update objects the agent sent before (Request.Updates).
//
// For session/request_permission, KIND is a tool kind and each ARG is a
// shell word: key=value sets title=, command=, path= (repeatable; becomes
// a location), url= or cwd= (rawInput.cwd); a bare word is the command
// line for execute, a URL for fetch, a path (location) for read, edit,
// delete, move and search, and the title otherwise. The title defaults to
// the command, "KIND PATH" or the URL. Example:
//
//	session/request_permission execute "git push --force origin main"
//
// In every form, ${cwd}, ${roots} (the first root) and ${home} are
// replaced by the test's values, and paths (not command lines) may start
// with ~/. Relative paths are relative to the test's cwd, except for the
// fs methods, where they are kept (and refused by the policy).
type TestCall struct {
	Pos    yamlpos.Pos
	Text   string          // the string form, "" for a mapping
	Method string          // the method
	Params json.RawMessage // the mapping form's params
	// Updates (mapping form) are the tool_call / tool_call_update objects
	// the agent sent before a session/request_permission (Request.Updates).
	Updates []json.RawMessage
	rest    string
}

// Default test context.
const (
	TestHome = "/home/user"
	TestCwd  = "/home/user/project"
)

func checkMethod(m string) error {
	if methodBit(m) == 0 {
		return fmt.Errorf("unknown method %q (the policy decides %s)", m, methodNames())
	}
	return nil
}

// ParseCall reads the string form of a call, "METHOD ARGS..." (see
// TestCall), as tests: and `acp-router policy explain` write it.
func ParseCall(s string) (*TestCall, error) {
	s = strings.TrimSpace(s)
	method, rest, _ := strings.Cut(s, " ")
	if err := checkMethod(method); err != nil {
		return nil, err
	}
	c := &TestCall{Text: s, Method: method, rest: strings.TrimSpace(rest)}
	switch method {
	case acp.MethodReadTextFile, acp.MethodWriteTextFile, acp.MethodTerminalCreate:
		if c.rest == "" {
			return nil, fmt.Errorf("%s needs an argument", method)
		}
	case acp.MethodRequestPermission:
		words, err := shellWords(c.rest)
		if err != nil {
			return nil, err
		}
		if len(words) == 0 || extract.KindBit(extract.Kind(words[0])) == 0 {
			return nil, fmt.Errorf("%s needs a tool kind first (%s)", method, joinKinds(extract.AllKinds))
		}
		for _, w := range words[1:] {
			if k, _, ok := strings.Cut(w, "="); ok && !slices.Contains([]string{"title", "command", "path", "url", "cwd"}, k) && extract.IsAssignment(w) {
				return nil, fmt.Errorf("unknown key %q (title, command, path, url, cwd)", k)
			}
		}
	case acp.MethodMcpMessage:
		if _, err := mcpCallWords(c.rest); err != nil {
			return nil, err
		}
	case extract.MethodSwitch, extract.MethodTurn, extract.MethodPick, extract.MethodCompare:
		words, err := shellWords(c.rest)
		if err != nil {
			return nil, err
		}
		switch {
		case len(words) == 0:
			return nil, fmt.Errorf("%s needs the agent it is about", method)
		case len(words) > 1 && method != extract.MethodCompare:
			return nil, fmt.Errorf("%s is about one agent, got %d (%s)", method, len(words), c.rest)
		}
	}
	return c, nil
}

// mcpCallWords reads the string form of an mcp/message call: "SERVER TOOL
// [ARGUMENTS]" (a tools/call; ARGUMENTS a JSON object) or "SERVER
// resources/read URI", SERVER the server's declared name.
func mcpCallWords(rest string) ([]string, error) {
	words, err := shellWords(rest)
	if err != nil {
		return nil, err
	}
	switch {
	case len(words) == 3 && words[1] == acp.McpResourcesRead:
	case len(words) == 2 && words[1] != acp.McpResourcesRead:
	case len(words) == 3: // the arguments, once ${...} are replaced (Request)
	default:
		return nil, fmt.Errorf("%s needs SERVER TOOL [ARGUMENTS] or SERVER resources/read URI", acp.MethodMcpMessage)
	}
	return words, nil
}

// shellWords splits a line into words with shell quoting; expansions are
// kept as written.
func shellWords(s string) ([]string, error) {
	f, err := syntax.NewParser().Parse(strings.NewReader(s), "")
	if err != nil {
		return nil, fmt.Errorf("cannot split %q into words: %v", s, err)
	}
	if len(f.Stmts) != 1 {
		return nil, fmt.Errorf("cannot split %q into words", s)
	}
	call, ok := f.Stmts[0].Cmd.(*syntax.CallExpr)
	if !ok || len(call.Assigns) > 0 || len(f.Stmts[0].Redirs) > 0 {
		return nil, fmt.Errorf("cannot split %q into words", s)
	}
	var out []string
	for _, w := range call.Args {
		if s, ok := extract.PlainText(w); ok {
			out = append(out, s)
		} else {
			out = append(out, extract.WordSource(w))
		}
	}
	return out, nil
}

// Session returns the session context of a test: its agent, mode, cwd
// (TestCwd by default) and roots, and home (TestHome when "").
func (t *TestCase) Session(home string) extract.Session {
	if home == "" {
		home = TestHome
	}
	sess := extract.Session{Agent: t.Agent, Mode: t.Mode, Cwd: t.Cwd, Roots: t.Roots, Home: home}
	if sess.Cwd == "" {
		sess.Cwd = TestCwd
	}
	return sess
}

// FS returns the test's filesystem: its files and symlinks.
func (t *TestCase) FS() *extract.MapFS { return extract.NewMapFS(t.Files, t.Symlinks) }

// Request builds the request the call stands for in the session
// (${cwd}, ${roots} and ${home} are the session's), resolved through fs.
func (c *TestCall) Request(sess extract.Session, fs extract.FS) (*extract.Request, error) {
	home := sess.Home
	req := &extract.Request{Method: c.Method, Session: sess, FS: fs}
	vars := strings.NewReplacer("${cwd}", sess.Cwd, "${roots}", sess.Cwd, "${home}", home)
	if c.Text == "" {
		req.Params = json.RawMessage(vars.Replace(string(c.Params)))
		for _, u := range c.Updates {
			req.Updates = append(req.Updates, json.RawMessage(vars.Replace(string(u))))
		}
		return req, nil
	}
	rest := vars.Replace(c.rest)
	tilde := func(p string) string {
		if p == "~" {
			return home
		}
		if r, ok := strings.CutPrefix(p, "~/"); ok {
			return path.Join(home, r)
		}
		return p
	}
	abs := func(p string) string {
		p = tilde(p)
		if !path.IsAbs(p) {
			p = path.Join(sess.Cwd, p)
		}
		return p
	}
	var params any
	switch c.Method {
	case acp.MethodReadTextFile:
		params = map[string]any{"sessionId": "test", "path": tilde(rest)}
	case acp.MethodWriteTextFile:
		params = map[string]any{"sessionId": "test", "path": tilde(rest), "content": ""}
	case acp.MethodTerminalCreate:
		params = map[string]any{"sessionId": "test", "command": rest}
	case acp.MethodMcpMessage:
		var err error
		if params, err = mcpParams(rest, req); err != nil {
			return nil, err
		}
	case acp.MethodRequestPermission:
		var err error
		if params, err = permissionParams(rest, abs); err != nil {
			return nil, err
		}
	case extract.MethodSwitch, extract.MethodTurn, extract.MethodPick, extract.MethodCompare:
		words, err := shellWords(rest)
		if err != nil {
			return nil, err
		}
		params = extract.CommandParams{Agents: words}
	}
	b, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	req.Params = b
	return req, nil
}

// mcpParams builds the params of an mcp/message call: SERVER TOOL [JSON]
// or SERVER resources/read URI; req gets the server's name.
func mcpParams(rest string, req *extract.Request) (any, error) {
	words, err := mcpCallWords(rest)
	if err != nil {
		return nil, err
	}
	req.McpServer = words[0]
	inner := map[string]any{"name": words[1]}
	method := acp.McpToolsCall
	if words[1] == acp.McpResourcesRead {
		method, inner = acp.McpResourcesRead, map[string]any{"uri": words[2]}
	} else if len(words) == 3 {
		var args map[string]any
		if json.Unmarshal([]byte(words[2]), &args) != nil {
			return nil, fmt.Errorf("%s: the tool's arguments %q are not a JSON object", acp.MethodMcpMessage, words[2])
		}
		inner["arguments"] = args
	}
	return map[string]any{"serverId": words[0], "requestId": 1, "method": method, "params": inner}, nil
}

// permissionParams builds the params of a session/request_permission call:
// KIND [title=T] [command=C] [path=P]... [url=U] [cwd=D] [WORD]...; abs
// makes a path absolute in the session.
func permissionParams(rest string, abs func(string) string) (any, error) {
	words, err := shellWords(rest)
	if err != nil {
		return nil, err
	}
	kind := words[0]
	var title, command, url, cwd string
	var paths []string
	var bare []string
	for _, w := range words[1:] {
		k, v, ok := strings.Cut(w, "=")
		switch {
		case ok && k == "title":
			title = v
		case ok && k == "command":
			command = v
		case ok && k == "path":
			paths = append(paths, abs(v))
		case ok && k == "url":
			url = v
		case ok && k == "cwd":
			cwd = abs(v)
		default:
			bare = append(bare, w)
		}
	}
	switch extract.Kind(kind) {
	case extract.KindExecute:
		if len(bare) > 0 {
			command = strings.Join(bare, " ")
		}
		title = cmp.Or(title, command)
	case extract.KindFetch:
		if len(bare) > 0 {
			url = bare[0]
		}
		title = cmp.Or(title, "fetch "+url)
	case extract.KindRead, extract.KindEdit, extract.KindDelete, extract.KindMove, extract.KindSearch:
		for _, b := range bare {
			paths = append(paths, abs(b))
		}
		if len(paths) > 0 {
			title = cmp.Or(title, kind+" "+paths[0])
		}
	default:
		title = cmp.Or(title, strings.Join(bare, " "))
	}
	raw := map[string]any{}
	if command != "" {
		raw["command"] = command
	}
	if url != "" {
		raw["url"] = url
	}
	if cwd != "" {
		raw["cwd"] = cwd
	}
	var locs []map[string]any
	for _, p := range paths {
		locs = append(locs, map[string]any{"path": p})
	}
	tc := map[string]any{"toolCallId": "test", "kind": kind, "rawInput": raw}
	if title != "" {
		tc["title"] = title
	}
	if locs != nil {
		tc["locations"] = locs
	}
	return map[string]any{"sessionId": "test", "toolCall": tc, "options": []map[string]any{
		{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
		{"optionId": "reject", "name": "Reject", "kind": "reject_once"}}}, nil
}

// jsonValue converts a YAML-decoded value into JSON.
func jsonValue(v any) (json.RawMessage, error) {
	var conv func(any) (any, error)
	conv = func(v any) (any, error) {
		switch v := v.(type) {
		case map[string]any:
			m := map[string]any{}
			for k, x := range v {
				c, err := conv(x)
				if err != nil {
					return nil, err
				}
				m[k] = c
			}
			return m, nil
		case map[any]any:
			return nil, errors.New("mapping keys must be strings")
		case []any:
			out := make([]any, len(v))
			for i, x := range v {
				c, err := conv(x)
				if err != nil {
					return nil, err
				}
				out[i] = c
			}
			return out, nil
		}
		return v, nil
	}
	c, err := conv(v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(c)
}

// TestResult is the outcome of one call of a test.
type TestResult struct {
	Case     *TestCase
	Call     *TestCall
	Decision Decision
	Pass     bool
	// Problem says why it failed.
	Problem string
	// Note, on a pass, says the rule the test named fired and made the
	// decision, but a rule of a layer above it decided first (repeats).
	Note string
}

// RunTests runs the tests of every layer, each against its own layer and
// the layers above it (the org's tests cannot be broken by a user's
// rules), and returns one result per call. ${home} and ~ are TestHome.
func (p *Policy) RunTests() []TestResult {
	var out []TestResult
	for k, l := range p.layers {
		if len(l.Tests) == 0 {
			continue
		}
		sub := p
		if k < len(p.layers)-1 {
			var err error
			if sub, err = Compile(p.layers[:k+1]...); err != nil {
				for _, t := range l.Tests {
					out = append(out, TestResult{Case: t, Problem: err.Error()})
				}
				continue
			}
		}
		for _, t := range l.Tests {
			if t.budget != nil {
				out = append(out, sub.runBudgetTest(t))
				continue
			}
			bad := sub.unknownRule(t.Rule, p)
			for _, c := range t.Calls {
				res := sub.runCall(t, c)
				if bad != "" {
					// Whatever the decision, a rule that cannot decide
					// is the mistake to report.
					res.Pass, res.Problem = false, bad
				}
				out = append(out, res)
			}
		}
	}
	return out
}

// unknownRule says why a test's rule: names no rule that can decide in p
// (the test's layer and those above it), "" when it names one: a rule in
// force or a built-in safeguard. all is the whole policy, to tell a typo
// from a rule of a lower layer or one lower_layers_may drops. It is a
// test failure rather than a load error because which ids exist is known
// only once the layers are compiled, and a failing test already stops the
// router from using the policy.
func (p *Policy) unknownRule(id string, all *Policy) string {
	builtin := []string{RuleRefused, RuleOpaque, RuleUnknownArguments, RuleDeniedMode, RuleSelfApprovingMode, RuleUnlistedMode, RuleUserCommand}
	if id == "" || slices.Contains(builtin, id) || slices.ContainsFunc(p.rules, func(r *Rule) bool { return r.ID == id }) {
		return ""
	}
	for _, r := range all.dropped {
		if r.ID == id {
			return fmt.Sprintf("the test names rule %q (%s), which the org layer's lower_layers_may drops", id, r.Pos)
		}
	}
	for _, r := range all.rules {
		if r.ID == id {
			return fmt.Sprintf("the test names rule %q of the %s layer (%s): the %s layer's tests run without the layers below it",
				id, r.Layer, r.Pos, p.layers[len(p.layers)-1].Name)
		}
	}
	ids := slices.Clone(builtin)
	for _, r := range p.rules {
		ids = append(ids, r.ID)
	}
	if near := closest(id, ids); near != "" {
		return fmt.Sprintf("the test names an unknown rule %q (did you mean %q?)", id, near)
	}
	return fmt.Sprintf("the test names an unknown rule %q", id)
}

// closest returns the id nearest to s by edit distance, if it is near
// enough to be a typo of it (at most a third of s, at least 1 edit, at
// most 3), else "". Ties go to the first.
func closest(s string, ids []string) string {
	limit := min(max(1, len(s)/3), 3)
	best, bestD := "", limit+1
	for _, id := range ids {
		if d := editDistance(s, id); d < bestD {
			best, bestD = id, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		diag := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			diag, row[j] = row[j], min(row[j]+1, row[j-1]+1, diag+cost)
		}
	}
	return row[len(b)]
}

func (p *Policy) runCall(t *TestCase, c *TestCall) TestResult {
	res := TestResult{Case: t, Call: c}
	req, err := c.Request(t.Session(TestHome), t.FS())
	if err != nil {
		res.Problem = err.Error()
		return res
	}
	res.Decision = p.Decide(req)
	d := &res.Decision
	switch {
	case d.Effect != t.Expect:
		res.Problem = fmt.Sprintf("expected %s, got %s", t.Expect, describeDecision(d))
	case t.Rule != "" && !decidedBy(d, t.Rule):
		if by := repeats(d, t.Rule, t.Layer); by != nil {
			// A user layer that restates what the org enforces is
			// not wrong, and must not stop the router from starting.
			res.Pass = true
			res.Note = fmt.Sprintf("%s by %s (%s layer) repeats %s (%s layer), which decides", d.Effect, t.Rule, t.Layer, by.Rule, by.Layer)
			break
		}
		res.Problem = fmt.Sprintf("expected %s by rule %s, got %s", t.Expect, t.Rule, describeDecision(d))
	default:
		res.Pass = true
	}
	if res.Pass && t.AnsweredBy != nil && !sameNames(t.AnsweredBy, d.Answerers) {
		res.Pass, res.Note = false, ""
		got := "anyone (no rule that asks says who answers)"
		if a := d.Answerers; a != nil {
			got = a.String() + " (" + a.Why() + ")"
		}
		res.Problem = fmt.Sprintf("expected ask answered by %s, got ask answered by %s", strings.Join(t.AnsweredBy, ", "), got)
	}
	return res
}

// sameNames: a holds exactly the names want, in any order.
func sameNames(want []string, a *Answerers) bool {
	if a == nil || len(a.Names) != len(want) {
		return false
	}
	for _, n := range want {
		if !slices.Contains(a.Names, n) {
			return false
		}
	}
	return true
}

// repeats returns the finding a rule of a layer above layer decided,
// with d's decision, on an item that rule (of layer) surely fired on with
// the same decision; nil if there is none. Of rules with the same
// decision the stronger layer's decides (Decide), so a lower layer's rule
// that repeats it never does, though it says what the test says.
func repeats(d *Decision, rule, layer string) *Finding {
	for i := range d.Findings {
		f := &d.Findings[i]
		if f.Effect != d.Effect || f.Source != SourceRule || f.Layer == layer {
			continue
		}
		for _, m := range f.Matches {
			if m.Rule == rule && m.Layer == layer && m.Effect == f.Effect && !m.Possible {
				return f
			}
		}
	}
	return nil
}

func describeDecision(d *Decision) string {
	if d.Rule == "" {
		return fmt.Sprintf("%s by the default (%s layer)", d.Effect, d.Layer)
	}
	return fmt.Sprintf("%s by %s (%s layer)", d.Effect, d.Rule, d.Layer)
}

// decidedBy reports whether rule decided d or one of the items that got
// d's decision.
func decidedBy(d *Decision, rule string) bool {
	if d.Rule == rule {
		return true
	}
	for _, f := range d.Findings {
		if f.Effect == d.Effect && f.Rule == rule {
			return true
		}
	}
	return false
}

// Untested returns the rules in force that no test result exercised: no
// call matched them (an unless that spared a call counts as exercised).
func (p *Policy) Untested(results []TestResult) []*Rule {
	hit := map[string]bool{}
	for _, r := range results {
		for _, f := range r.Decision.Findings {
			for _, m := range f.Matches {
				hit[m.Layer+"\x00"+m.Rule] = true
			}
			for _, id := range f.Excepted {
				hit["\x00"+id] = true
			}
		}
	}
	var out []*Rule
	for _, r := range p.rules {
		if !hit[r.Layer+"\x00"+r.ID] && !hit["\x00"+r.ID] {
			out = append(out, r)
		}
	}
	return out
}

// Shadow is a rule that can never decide and a rule that matches
// everything it matches and decides there instead.
type Shadow struct {
	Rule, By *Rule
}

// Shadowed returns the rules that can never decide anything: on
// everything such a rule matches, another rule matches too and wins. A
// rule wins when its decision is stricter, or equal and it comes first in
// Rules (the stronger layer, then the smaller id): of rules that give an
// item the same decision, the first decides and is the one the audit log
// and explain name (decideItem). So of two identical deny rules, the one
// with the smaller id (in the same layer) is named and the other is
// reported, covered by it; their file order never matters, like rule
// order for decisions (TestPropertyRuleOrder).
//
// The check is static and conservative: it only reports what it can
// prove from the patterns as written (the same or a wider list on every
// key of the winning rule: a prefix/** glob over a longer path, ** over
// more command tokens, *.x over a subdomain, ...), so a rule it reports
// never decides, and one it does not report may still never decide in
// practice. A winning rule with unless only counts when the covered
// rule's own unless spares at least everything it spares.
func (p *Policy) Shadowed() []Shadow {
	var out []Shadow
	for i, r := range p.rules {
		for j, s := range p.rules {
			if j != i && shadows(s, r, j < i) {
				out = append(out, Shadow{r, s})
				break
			}
		}
	}
	return out
}

// shadows reports whether s decides every item r matches, so that r
// never decides; first is whether s comes before r in Rules.
func shadows(s, r *Rule, first bool) bool {
	if r.When.methods&commandMethodBits&^s.When.methods != 0 {
		// A rule that does not name a command's method never decides it.
		return false
	}
	if len(r.AnsweredBy) > 0 && (s.Decision == Ask || r.When.has("paths")) &&
		!(s.Decision == Ask && len(s.AnsweredBy) > 0 && s.Layer == LayerOrg && r.Layer != LayerOrg) {
		// Where s asks, r's answered_by still says who answers (it is
		// intersected with those of its layer, or holds over a weaker
		// layer's): r takes effect though it never names the decision.
		return false
	}
	switch {
	case s.Decision < r.Decision:
		return false
	case s.Decision == r.Decision,
		// A deny that only possibly matches below a recursively read
		// directory asks, and may tie with an ask rule there.
		s.Decision == Deny && r.Decision == Ask && r.When.has("paths"):
		if !first {
			return false // on a tie, r decides
		}
	}
	// An allow rule matches with the every-form quantifier, deny and ask
	// with the any-form one; s is an allow only if r is one too.
	if !condSubsumes(s.When, r.When, s.Decision == Allow) {
		return false
	}
	if s.Unless == nil {
		return true
	}
	// Whenever s's exception spares an item, r's must spare it too. Their
	// quantifiers are those of the rules, reversed: compare only when they
	// are the same.
	return r.Unless != nil && (s.Decision == Allow) == (r.Decision == Allow) &&
		condSubsumes(r.Unless, s.Unless, r.Decision != Allow)
}

// condSubsumes reports whether every item (and request) r matches, s
// matches too. strict is whether s is matched with the every-form
// quantifier (then r is too).
func condSubsumes(s, r *Cond, strict bool) bool {
	for key, sv := range s.src {
		rv, ok := r.src[key]
		if !ok {
			return false
		}
		for _, re := range rv {
			if !slices.ContainsFunc(sv, func(se string) bool { return entrySubsumes(key, se, re, strict) }) {
				return false
			}
		}
	}
	return true
}

// entrySubsumes reports whether entry se of a matcher key matches all that
// entry re matches (see condSubsumes for strict).
func entrySubsumes(key, se, re string, strict bool) bool {
	if se == re {
		return true
	}
	switch key {
	case "agent", "mode", "env", "program", "title", "tool":
		if strings.HasPrefix(se, "re:") || strings.HasPrefix(re, "re:") {
			return false
		}
		if key == "program" && strict && strings.Contains(re, "/") && !strings.Contains(se, "/") {
			return false // a strict program without a slash never matches a program written with a path
		}
		sp, err1 := compileText(se)
		rp, err2 := compileText(re)
		return err1 == nil && err2 == nil && rp.exact && sp.match(rp.lit)
	case "paths", "cwd":
		sp, err1 := compilePath(se)
		rp, err2 := compilePath(re)
		return err1 == nil && err2 == nil && pathSubsumes(&sp, &rp)
	case "command":
		sp, err1 := compileCommand(se)
		rp, err2 := compileCommand(re)
		return err1 == nil && err2 == nil && commandSubsumes(sp.toks, rp.toks, strict)
	case "domains":
		sp, err1 := compileDomain(se)
		rp, err2 := compileDomain(re)
		if err1 != nil || err2 != nil {
			return false
		}
		switch {
		case sp.any:
			return true
		case sp.suffix != "" && rp.exact != "":
			return sp.match(rp.exact)
		case sp.suffix != "" && rp.suffix != "":
			return strings.HasSuffix(rp.suffix, sp.suffix)
		}
	}
	return false
}

func pathSubsumes(s, r *pathPattern) bool {
	if s.all && (s.anchor == r.anchor || s.anchor == anchorRoot || s.anchor == anchorAny) {
		return true
	}
	if s.anchor == r.anchor {
		if pre, ok := strings.CutSuffix(s.rest, "/**"); ok && !strings.ContainsAny(pre, `*?[{\`) {
			if r.rest == pre || strings.HasPrefix(r.rest, pre+"/") {
				return true
			}
		}
		if r.lit {
			ok, _ := doublestar.Match(s.rest, r.rest)
			return ok
		}
	}
	if s.anchor == anchorAny && r.lit {
		ok, _ := doublestar.Match(s.rest, path.Join(probe, r.rest))
		return ok
	}
	return false
}

// commandSubsumes reports whether the token pattern s matches every argv
// r matches (see condSubsumes for strict).
func commandSubsumes(s, r []cmdToken, strict bool) bool {
	if len(s) == 0 {
		return len(r) == 0
	}
	switch s[0].kind {
	case tokAny:
		for k := 0; k <= len(r); k++ {
			if commandSubsumes(s[1:], r[k:], strict) {
				return true
			}
		}
		return false
	case tokOne:
		return len(r) > 0 && r[0].kind != tokAny && commandSubsumes(s[1:], r[1:], strict)
	}
	if len(r) == 0 || r[0].kind != tokLit {
		return false
	}
	if r[0].slash && !s[0].slash && strict {
		return false // as for program: strict git is never /usr/bin/git
	}
	if s[0].p.src != r[0].p.src && !(r[0].p.exact && s[0].p.match(r[0].p.lit)) {
		if !(r[0].slash && !s[0].slash && r[0].p.exact && s[0].p.match(extract.ProgramName(r[0].p.lit))) {
			return false
		}
	}
	return commandSubsumes(s[1:], r[1:], strict)
}
