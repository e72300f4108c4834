package extract

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/acp-router/acp-router/acp"
	"mvdan.cc/sh/v3/syntax"
)

// Request is one agent → client request to decide.
type Request struct {
	// Method is the JSON-RPC method: session/request_permission,
	// fs/read_text_file, fs/write_text_file, terminal/create or
	// mcp/message (mcp.go). Any other method gives one opaque item.
	Method string
	// Params are the request's params as received.
	Params json.RawMessage
	// Updates are, for session/request_permission, the tool_call and
	// tool_call_update objects (the "update" of session/update) the agent
	// sent earlier for the same toolCallId, oldest first. Their fields are
	// merged with the request's toolCall: every kind, title, location and
	// rawInput any of them names is evidence.
	Updates []json.RawMessage
	// McpServer is, for mcp/message, the name the session declared for the
	// ACP MCP server its serverId names (mcpServers[].name): the SERVER of
	// the tool's name mcp__SERVER__TOOL. "": the serverId.
	McpServer string
	// McpAmbiguous: SERVER does not name this server alone (McpNameAmbiguous):
	// a tools/call to it is opaque, for no tool: rule can tell them apart.
	McpAmbiguous bool
	// Session is the context of the session the request belongs to.
	Session Session
	// FS resolves symlinks and answers which paths exist. nil: nothing
	// exists and there are no symlinks.
	FS FS
	// Kernel is what the kernel keeps from the processes that carry the
	// request out (the agent's sandbox, issue 29); nil: nothing, or they
	// are not confined.
	Kernel KernelGuard
}

// KernelGuard is the kernel's half seen from a decision: the paths the
// sandbox keeps from the processes that carry a request out (issue 29
// req. 5). A recursive read that a deny or ask rule could match only
// below the directory read is not asked (by the policy) for what is there when every
// such path is kept away: the program reads it as empty, or not at all.
type KernelGuard interface {
	// Hides reports whether the kernel keeps the file or directory at
	// the absolute path p (its symlinks resolved by the guard) from the
	// processes: masked now, by a mask that is still in place.
	Hides(p string) bool
}

// Session is what a decision needs to know about the session.
type Session struct {
	Agent string // the router's name for the agent (config agents[].name)
	// AgentInfo is the name the agent gives itself (agentInfo.name of its
	// initialize result), "" if unknown: with Agent, what the built-in
	// table of modes knows it as.
	AgentInfo string
	Mode      string // the agent's current mode id, "" if unknown
	// Cwd is the session's working directory (absolute). ${cwd}.
	Cwd string
	// Roots are the directories of ${roots} besides Cwd (additional
	// directories of the session).
	Roots []string
	// Home is the user's home directory: ${home} and ~.
	Home string
}

// ItemType says what an evidence item is about.
type ItemType uint8

const (
	ItemPath    ItemType = iota + 1 // a file or directory
	ItemCommand                     // a simple command
	ItemDomain                      // a host name
	ItemTool                        // a tool call with no path, command or domain
	ItemAgent                       // the agent a router command is about (command.go)
)

func (t ItemType) String() string {
	switch t {
	case ItemPath:
		return "path"
	case ItemCommand:
		return "command"
	case ItemDomain:
		return "domain"
	case ItemTool:
		return "tool"
	case ItemAgent:
		return "agent"
	}
	return "unknown"
}

// MarshalText writes the type's name.
func (t ItemType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Item is one piece of evidence. Decide gives each item its own decision.
// The exported fields are what the audit log and explain show: paths,
// commands and domains, never file contents or environment values.
type Item struct {
	Type  ItemType `json:"type"`
	Kinds []Kind   `json:"kinds"`
	// Origin says where the item comes from ("fs path", "locations",
	// "argument of cat", "redirect", "wrapper", ...).
	Origin string `json:"origin,omitempty"`

	// Path is the path as written, made absolute and cleaned.
	Path string `json:"path,omitempty"`
	// Forms are every spelling the path is matched in: cleaned and
	// symlink-resolved, for each directory a relative path may be relative
	// to.
	Forms []string `json:"forms,omitempty"`
	// Unresolved: a form's symlinks could not be resolved; no allow covers
	// the item.
	Unresolved bool `json:"unresolved,omitempty"`
	// Recursive: the path is read or written with everything below it
	// (grep -r DIR, cp -r DIR). A rule that matches something below it
	// asks; an allow must cover all of it.
	Recursive bool `json:"recursive,omitempty"`
	// SkipsHidden: the recursive read skips dotfiles (rg and ag by
	// default), so rules that only match below a hidden name do not apply.
	SkipsHidden bool `json:"skipsHidden,omitempty"`
	// Walk: how the program walks the tree below a recursive item (the
	// names it skips, the symlinks it opens); nil: it reads everything
	// below, every symlink followed. Shared, never modified.
	Walk *Walk `json:"walk,omitempty"`

	// Argv is the command as the program receives it, quotes removed;
	// an argument the router cannot know is shown as written.
	Argv []string `json:"argv,omitempty"`
	// Program is the basename of argv[0] ("" when the program is computed
	// at run time); ProgramPath is argv[0] as written, cleaned.
	Program     string `json:"program,omitempty"`
	ProgramPath string `json:"programPath,omitempty"`
	// ProgramForms: for a program written with a /, the file the shell
	// runs: the path joined to each directory the command may run in,
	// cleaned, and with its symlinks resolved; empty when the directory
	// is not known. A command pattern whose program has a / is matched
	// against them (matchProgram).
	ProgramForms []string `json:"programForms,omitempty"`
	Flags        []string `json:"flags,omitempty"`
	// Env are the names of the variables the command line sets for the
	// command (VAR=x prefixes, env wrappers, terminal/create env).
	Env []string `json:"env,omitempty"`

	Domain string `json:"domain,omitempty"`
	// Agent is the agent an ItemAgent names.
	Agent string `json:"agent,omitempty"`
	// DomainInvalid: the host is not a valid host name; no allow covers it.
	DomainInvalid bool `json:"domainInvalid,omitempty"`

	// Opaque says why the router cannot see through this item; no allow
	// covers it, so it is at least ask.
	Opaque string `json:"opaque,omitempty"`
	// Unknown says which part of a command's arguments the router does not
	// understand (an option its spec does not list, a program without a
	// spec, an operand it has no role for). An allow rule covers the item
	// only when it says its arguments do not matter (arguments: any) or a
	// command pattern of it names every argument literally (closed-world
	// allow, issue 14); deny and ask rules match it as usual.
	Unknown string `json:"unknown,omitempty"`
	// Refused says why the request is refused outright (deny).
	Refused string `json:"refused,omitempty"`
	// Aux marks an item that can only make the decision stricter (a
	// transparent wrapper such as timeout or bash -c around its payload):
	// when no rule matches it, it does not fall to the default.
	Aux bool `json:"aux,omitempty"`

	// Unshown: read from a tool call's _meta, which no editor shows
	// (ACP reserves it for extensions): the user who approves the tool
	// call never saw it (Evidence.Shown).
	Unshown bool `json:"unshown,omitempty"`

	canon []string // Argv with flag runs normalised, for command patterns
	// subArgv is Argv without the options before its subcommands, and
	// subCanon its canon: a pattern naming a subcommand matches either.
	subArgv, subCanon []string
	kinds             KindSet
	// shapeOf, for a path read by shape from the arguments of a program
	// without a spec: 1 + the index of its command item, whose argv is
	// shapeKey (checked, so that a copy of the evidence with items left
	// out never names another command). See vouchedShape.
	shapeOf  int32
	shapeKey string
}

// String describes the item in one line.
func (it *Item) String() string {
	var s string
	switch it.Type {
	case ItemPath:
		s = it.Path
		if it.Recursive {
			s += "/**"
		}
	case ItemCommand:
		s = strings.Join(it.Argv, " ")
	case ItemDomain:
		s = it.Domain
	case ItemAgent:
		s = it.Agent
	default:
		s = "(tool call)"
	}
	return s
}

// Evidence is everything a request is about.
type Evidence struct {
	Method    string `json:"method"`
	Agent     string `json:"agent,omitempty"`
	AgentInfo string `json:"agentInfo,omitempty"`
	Mode      string `json:"mode,omitempty"`
	// Titles are the tool call's titles (request_permission; every title
	// the tool call had).
	Titles []string `json:"titles,omitempty"`
	// Tools are the tool call's programmatic names (ToolCall.name;
	// request_permission; every name it had), or the MCP tool an
	// mcp/message calls (mcp__SERVER__TOOL: McpToolName). The agent names
	// its own tools: a name says what the agent calls the tool, never what
	// the tool does, so it only selects rules and never adds kinds or
	// items.
	Tools []string `json:"tools,omitempty"`
	// Cwds are the working directories of the request: the session's and a
	// command's own (terminal/create cwd, rawInput.cwd), cleaned and
	// resolved.
	Cwds  []string `json:"cwds,omitempty"`
	Items []Item   `json:"items"`

	vars Vars
}

// Issue 14 point 3: every limit fails closed. Past maxItems the evidence
// is too large to allow (one opaque item says so), but every further item
// is still extracted, so that deny and ask rules see all of it; past
// maxEvidence, the hard bound on the time and memory of one decision, the
// request is refused.
const (
	maxItems    = 256
	maxEvidence = 1 << 14
)

// Extract builds the evidence of a request (DESIGN §6). It never fails:
// what it cannot read becomes an opaque or refused item.
func Extract(req *Request) *Evidence {
	x := extract(req)
	if len(x.madeLinks) > 0 || len(x.madeTrees) > 0 {
		// The line makes symlinks: read it again with them, so that every
		// path through one is resolved to where it leads.
		r := *req
		r.FS = newLinkFS(req.FS, x.madeLinks, x.madeTrees)
		x = extract(&r)
	}
	return x.ev
}

func extract(req *Request) *extractor {
	x := newExtractor(req)
	x.ambiguous(req)
	switch req.Method {
	case acp.MethodReadTextFile:
		x.fsCall(req.Params, KindRead)
	case acp.MethodWriteTextFile:
		x.fsCall(req.Params, KindEdit)
	case acp.MethodTerminalCreate:
		x.terminal(req.Params)
	case acp.MethodRequestPermission:
		x.permission(req.Params, req.Updates)
	case acp.MethodMcpMessage:
		x.mcpMessage(req.Params, req.McpServer, req.McpAmbiguous)
	case MethodSwitch, MethodTurn, MethodCompare, MethodPick:
		x.command(req.Params)
	default:
		x.add(Item{Type: ItemTool, Origin: "method", Opaque: fmt.Sprintf("the policy does not understand %q", req.Method)}, KindOther)
	}
	x.writtenOptions()
	if len(x.ev.Items) == 0 {
		// Nothing to see (a command line of assignments only): the request
		// itself is the evidence.
		kind := KindOther
		if req.Method == acp.MethodTerminalCreate {
			kind = KindExecute
		}
		x.add(Item{Type: ItemTool, Origin: "request"}, kind)
	}
	return x
}

// ambiguous refuses a request with an object holding two members that name
// the same field for encoding/json (acp.AmbiguousMember: "path" and
// "PATH"): decoding into a struct, the policy would read the last of them,
// the editor the exactly named one, so that the path, command or cwd decided
// would not be the one read, run or written; and fs or terminal params with
// one member spelled otherwise than its field ("Path", "Args":
// acp.FoldedMember), which the policy would read and the editor not. The
// rest is still extracted, for the deny and ask rules and the audit.
func (x *extractor) ambiguous(req *Request) {
	kind := KindOther
	switch req.Method {
	case acp.MethodReadTextFile:
		kind = KindRead
	case acp.MethodWriteTextFile:
		kind = KindEdit
	case acp.MethodTerminalCreate:
		kind = KindExecute
	}
	for i, raw := range append([]json.RawMessage{req.Params}, req.Updates...) {
		if a, b, ok := acp.AmbiguousMember(raw); ok {
			origin := "params"
			if i > 0 {
				origin = "tool_call update"
			}
			x.refuse(origin, fmt.Sprintf("members %q and %q name the same field to a decoder that ignores case; the editor or agent may read either", a, b), kind)
			return
		}
	}
	// One member spelled otherwise than the schema's name, in an object
	// the policy decodes into a struct: its decoder would read it, the
	// editor not (a tool call's rawInput and _meta are maps, read by
	// exact names).
	var want, got string
	found := false
	check := func(obj json.RawMessage, names ...string) {
		if !found && len(obj) > 0 {
			want, got, found = acp.FoldedMember(obj, names...)
		}
	}
	member := func(obj json.RawMessage, name string) json.RawMessage {
		var v [1]json.RawMessage
		if acp.MembersOfValid(obj, []string{name}, v[:]) != nil {
			return nil
		}
		return v[0]
	}
	each := func(arr json.RawMessage, names ...string) {
		if len(arr) > 0 && arr[0] == '[' {
			acp.EachElementOfValid(arr, func(e json.RawMessage) bool { check(e, names...); return !found })
		}
	}
	switch req.Method {
	case acp.MethodReadTextFile, acp.MethodWriteTextFile:
		check(req.Params, "path")
	case acp.MethodTerminalCreate:
		check(req.Params, "command", "args", "env", "cwd")
		each(member(req.Params, "env"), "name", "value")
	case acp.MethodMcpMessage:
		check(req.Params, "serverId", "requestId", "method", "params")
	case acp.MethodRequestPermission:
		check(req.Params, "toolCall")
		for _, tc := range append([]json.RawMessage{member(req.Params, "toolCall")}, req.Updates...) {
			if len(tc) == 0 || tc[0] != '{' {
				continue
			}
			check(tc, "kind", "title", "name", "locations", "rawInput", "content", "_meta")
			each(member(tc, "locations"), "path")
			each(member(tc, "content"), "type", "path")
		}
	}
	if found {
		x.refuse("params", fmt.Sprintf("member %q is %q to a decoder that ignores case, but not to the editor, which reads names exactly", got, want), kind)
	}
}

// extractor builds one request's evidence.
type extractor struct {
	ev   *Evidence
	fs   FS
	cwd  string // the session's cwd, cleaned ("" if not absolute)
	home string
	// truncated: maxItems reached, nothing may be allowed; full:
	// maxEvidence reached, the request is refused and nothing more added.
	truncated, full bool
	deep            bool                // a command nested past MaxDepth was recorded
	unshown         bool                // reading a tool call's _meta: items are Unshown
	seen            map[itemKey][]int32 // indexes of Items, to find duplicates
	// madeLinks: the symlinks the command line makes (ln -s), where the
	// kernel makes them → their targets (see linkFS).
	madeLinks map[string][]string
	madeKeys  []string // the keys of madeLinks, in the order recorded
	// madeTrees: directories an archive is extracted into (tar x, unzip):
	// what is below them, symlinks included, is not known.
	madeTrees []string
	// links made by an earlier command of the same command line (ln,
	// cp -s/-l): a path through one is also a path to its target.
	links []link
	// arithBad: variables the command line assigns something other than
	// a number (arith.go), at any level of nesting.
	arithBad map[string]bool
	// assigned: the assignments analysed, with why their value is not
	// understood (state.go reads them before the commands they prefix).
	assigned map[*syntax.Assign]string
	// globbed: the directories the line's globs list (glob.go).
	globbed []globAt
	// nullglob: the line runs shopt -s nullglob somewhere; unmatchedGlob:
	// a glob of the line matched nothing (glob.go).
	nullglob, unmatchedGlob bool
	// loopDepth: the command being read is inside a loop's body or a
	// function (glob.go's globAt.again).
	loopDepth int
	// mcpArgs: reading an MCP tool's arguments, which are what the tool
	// acts on, not a description of it: a value shaped like a path is a
	// path at any depth (rawValue).
	mcpArgs bool
	// shape: while the arguments of a program without a spec are read by
	// shape, 1 + the index of its command item and that item's argv
	// (Item.shapeOf); lastAdded: the index of the item add last added or
	// found already there, -1 when none.
	shapeOf   int32
	shapeKey  string
	lastAdded int
	// walk: the walk of the program whose arguments are being recorded
	// (applyArgs, tar c), given to the recursive reads argPath records;
	// each command sets its own (argv clears it).
	walk *Walk
}

// withWalk makes w the walk of the recursive reads recorded until the
// returned function restores the previous one.
func (x *extractor) withWalk(w *Walk) func() {
	old := x.walk
	x.walk = w
	return func() { x.walk = old }
}

// link is a link a command makes: the absolute, clean path of the link
// and of what it leads to.
type link struct{ at, to string }

// throughLinks adds to the absolute paths fulls the paths they lead to
// through the links made earlier in the command line (a few levels).
func (x *extractor) throughLinks(fulls []string) []string {
	if len(x.links) == 0 {
		return fulls
	}
	for range 4 {
		n := len(fulls)
		for _, f := range fulls {
			c := path.Clean(f)
			for _, l := range x.links {
				if rest, ok := strings.CutPrefix(c, l.at); ok && (rest == "" || strings.HasPrefix(rest, "/")) {
					if t := l.to + rest; !slices.Contains(fulls, t) {
						fulls = append(fulls, t)
					}
				}
			}
		}
		if len(fulls) == n {
			break
		}
	}
	return fulls
}

// itemKey is what two equal items (sameItem) share.
type itemKey struct {
	typ          ItemType
	kinds        KindSet
	nargs        int
	path, domain string
}

func newExtractor(req *Request) *extractor {
	s := req.Session
	x := &extractor{fs: req.FS}
	x.ev = &Evidence{Method: req.Method, Agent: s.Agent, AgentInfo: s.AgentInfo, Mode: s.Mode, Items: make([]Item, 0, 16)}
	if path.IsAbs(s.Cwd) {
		x.cwd = path.Clean(s.Cwd)
		x.ev.Cwds = x.forms(x.cwd)
	}
	if path.IsAbs(s.Home) {
		x.home = path.Clean(s.Home)
	}
	v := &x.ev.vars
	v.Cwd = slices.Clone(x.ev.Cwds)
	for _, r := range append([]string{s.Cwd}, s.Roots...) {
		if path.IsAbs(r) {
			for _, f := range x.forms(path.Clean(r)) {
				if !slices.Contains(v.Roots, f) {
					v.Roots = append(v.Roots, f)
				}
			}
		}
	}
	if x.home != "" {
		v.Home = x.forms(x.home)
	}
	return x
}

// forms returns p (absolute) cleaned and, if different, resolved.
func (x *extractor) forms(p string) []string {
	c := path.Clean(p)
	if x.fs == nil {
		return []string{c}
	}
	r, err := x.fs.Resolve(p)
	if err != nil || r == "" {
		return []string{c}
	}
	if r = path.Clean(r); r != c {
		return []string{c, r}
	}
	return []string{c}
}

// add appends an item with the given kinds.
func (x *extractor) add(it Item, kinds ...Kind) {
	x.lastAdded = -1
	if x.full {
		return
	}
	if len(x.ev.Items) >= maxEvidence {
		x.full = true
		x.ev.Items = append(x.ev.Items, Item{Type: ItemTool, Kinds: []Kind{KindOther}, kinds: KindBit(KindOther),
			Origin: "request", Refused: fmt.Sprintf("more than %d pieces of evidence: too large to decide", maxEvidence)})
		return
	}
	if len(x.ev.Items) >= maxItems && !x.truncated {
		x.truncated = true
		x.ev.Items = append(x.ev.Items, Item{Type: ItemTool, Kinds: []Kind{KindOther}, kinds: KindBit(KindOther),
			Origin: "request", Opaque: fmt.Sprintf("more than %d pieces of evidence: too many to allow"+
				" (deny and ask rules saw every piece)", maxItems)})
	}
	if it.Opaque != "" || it.Unknown != "" {
		it.Aux = false // what cannot be seen is never only auxiliary
	}
	it.Unshown = it.Unshown || x.unshown
	for _, k := range kinds {
		if b := KindBit(k); it.kinds&b == 0 {
			it.kinds |= b
			it.Kinds = append(it.Kinds, k)
		}
	}
	if it.Type == ItemPath && it.Opaque == "" {
		// A write to a tool's configuration decides what the tool runs
		// later (configs.go).
		if why := configWrite(&it); why != "" {
			it.Opaque, it.Aux = why, false
		}
	}
	if it.Type == ItemCommand && it.canon == nil {
		it.canon = CanonArgs(it.Argv, nil)
		if it.subArgv != nil {
			it.subCanon = CanonArgs(it.subArgv, nil)
		}
	}
	if it.Type == ItemPath && x.shapeOf > 0 {
		it.shapeOf, it.shapeKey = x.shapeOf, x.shapeKey
	}
	// The same path, command or domain twice is one item.
	if x.seen == nil {
		x.seen = map[itemKey][]int32{}
	}
	key := itemKey{it.Type, it.kinds, len(it.Argv), it.Path, it.Domain}
	for _, i := range x.seen[key] {
		if sameItem(&x.ev.Items[i], &it) {
			x.lastAdded = int(i)
			return
		}
	}
	x.seen[key] = append(x.seen[key], int32(len(x.ev.Items)))
	x.lastAdded = len(x.ev.Items)
	x.ev.Items = append(x.ev.Items, it)
}

// shapeKey identifies a command item for the paths read by shape from its
// arguments.
func shapeKey(it *Item) string {
	return it.ProgramPath + "\x00" + strings.Join(it.Argv, "\x00")
}

func sameItem(a, b *Item) bool {
	return a.Type == b.Type && a.Path == b.Path && len(a.Argv) == len(b.Argv) && a.kinds == b.kinds &&
		a.Aux == b.Aux && a.Opaque == b.Opaque && a.Unknown == b.Unknown && a.Refused == b.Refused && a.Recursive == b.Recursive &&
		a.SkipsHidden == b.SkipsHidden && a.Walk == b.Walk && a.Unresolved == b.Unresolved && a.Domain == b.Domain &&
		a.DomainInvalid == b.DomainInvalid &&
		slices.Equal(a.Forms, b.Forms) && slices.Equal(a.Argv, b.Argv) && slices.Equal(a.Env, b.Env) &&
		a.ProgramPath == b.ProgramPath && a.Program == b.Program && slices.Equal(a.ProgramForms, b.ProgramForms) &&
		a.shapeOf == b.shapeOf && a.shapeKey == b.shapeKey
}

// refuse records a request the router refuses outright.
func (x *extractor) refuse(origin, why string, kind Kind) {
	x.add(Item{Type: ItemTool, Origin: origin, Refused: why}, kind)
}

// opaque records something the router cannot see through.
func (x *extractor) opaque(origin, why string, kind Kind) {
	x.add(Item{Type: ItemTool, Origin: origin, Opaque: why}, kind)
}

// fsCall reads fs/read_text_file and fs/write_text_file params.
func (x *extractor) fsCall(params json.RawMessage, kind Kind) {
	var p struct {
		Path *string `json:"path"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.Path == nil || *p.Path == "" {
		x.refuse("params", "the request has no path", kind)
		return
	}
	if !path.IsAbs(*p.Path) {
		// ACP requires absolute paths; a relative one would be resolved
		// against whatever directory the editor chooses.
		x.refuse("path", fmt.Sprintf("relative path %q (ACP file paths must be absolute)", *p.Path), kind)
		return
	}
	x.path(*p.Path, false, kind, false, "path", nil)
}

// terminal reads terminal/create params.
func (x *extractor) terminal(params json.RawMessage) {
	var p struct {
		Command *string  `json:"command"`
		Args    []string `json:"args"`
		Env     []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"env"`
		Cwd *string `json:"cwd"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		x.refuse("params", "the params do not decode: "+err.Error(), KindExecute)
		return
	}
	if p.Command == nil || strings.TrimSpace(*p.Command) == "" {
		x.refuse("params", "the request has no command", KindExecute)
		return
	}
	cwds := x.dirs(x.cwd)
	if p.Cwd != nil && *p.Cwd != "" {
		if !path.IsAbs(*p.Cwd) {
			x.refuse("cwd", fmt.Sprintf("relative cwd %q (ACP requires an absolute path)", *p.Cwd), KindExecute)
			return
		}
		// ${cwd}/link/.. is where the kernel goes, not what path.Clean
		// says: both are candidates.
		cwds = x.logicalPhysical(*p.Cwd)
		for _, d := range cwds {
			x.addCwd(d)
		}
	}
	var env []string
	envUnknown := ""
	for _, e := range p.Env {
		env = append(env, e.Name)
		if why := x.assignString(e.Name, e.Value, true, cmdCtx{cwds: cwds, origin: "env"}); why != "" && envUnknown == "" {
			envUnknown = why
		}
	}
	cx := cmdCtx{cwds: cwds, origin: "command", env: env, envUnknown: envUnknown}
	if len(p.Args) == 0 {
		// Agents such as kimi-cli pass a whole command line as command.
		x.script(*p.Command, cx)
		return
	}
	argv := make([]arg, 0, 1+len(p.Args))
	argv = append(argv, arg{s: *p.Command})
	for _, a := range p.Args {
		argv = append(argv, arg{s: a})
	}
	x.argv(argv, cx)
	if joined, ok := joinedLine(*p.Command, p.Args); ok {
		// Issue 27: an editor may join command and args into one line for
		// its shell (the schema does not say it must not), which then
		// reads what they hold: $(...), `...`, ;, |, &, redirections,
		// globs, ~, $VAR, quotes, and words an argument's spaces split
		// into options. Both readings are evidence.
		jcx := cx
		jcx.origin = "command and args as one shell line"
		x.script(joined, jcx)
	}
}

// joinedLine returns command and args joined with spaces, as an editor
// that runs them through its shell without quoting would, when the shell
// would read that line otherwise than the argv (false when every word is
// a plain word, or the only difference is a shell's -c script whose first
// word is plain: the joined line runs that word alone, a part of what
// the script runs, with the rest of the script read by the outer shell
// as the script itself is read).
func joinedLine(command string, args []string) (string, bool) {
	plain := func(s string, first bool) bool {
		if s == "" {
			return false
		}
		for i := 0; i < len(s); i++ {
			c := s[i]
			if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_@%+:,./-", c) >= 0 {
				continue
			}
			if c == '=' && !first {
				continue
			}
			return false
		}
		return true
	}
	joined := command + " " + strings.Join(args, " ")
	differs := !plain(command, true)
	for _, a := range args {
		differs = differs || !plain(a, false)
	}
	if !differs {
		return "", false
	}
	if !plain(command, true) || !shells[ProgramName(command)] {
		return joined, true
	}
	// SHELL [-opts] -c SCRIPT, the script last, and every word before it
	// an option as the shell reads them: after --, or as the value of
	// --rcfile or -o, -c is a word like any other (bash -- -c 'x; y' runs
	// a file named -c, and the joined line runs y itself).
	for i, a := range args {
		if !plain(a, false) {
			if i == 0 || i != len(args)-1 || !shellOptionsThenC(args[:i]) {
				return joined, true
			}
			w := strings.Fields(a)
			if len(w) == 0 || !plain(w[0], true) {
				return joined, true
			}
			return "", false
		}
	}
	return joined, true
}

// shellOptionsThenC reports whether opts are a shell's options, read as
// the shell reads them, the last of them holding c.
func shellOptionsThenC(opts []string) bool {
	for j := 0; j < len(opts); {
		o := opts[j]
		switch {
		case o == "--" || o == "-" || len(o) < 2 || o[0] != '-' && o[0] != '+':
			return false
		case strings.HasPrefix(o, "--"):
			if o == "--rcfile" || o == "--init-file" {
				j++
			}
			j++
		default:
			// -o and -O take the next word as their option.
			j += 1 + strings.Count(o, "o") + strings.Count(o, "O")
		}
		if j > len(opts) || j == len(opts) && (o[0] != '-' || strings.HasPrefix(o, "--") ||
			!strings.Contains(o, "c") || strings.ContainsAny(o, "oO")) {
			return false
		}
	}
	return len(opts) > 0
}

// addCwd records a command's own working directory as a form of ${cwd}
// matchers.
func (x *extractor) addCwd(dir string) {
	for _, f := range x.forms(dir) {
		if !slices.Contains(x.ev.Cwds, f) {
			x.ev.Cwds = append(x.ev.Cwds, f)
		}
	}
}

// dirs returns the working directories a command starts in.
func (x *extractor) dirs(cwd string) []string {
	if cwd == "" {
		return nil
	}
	return []string{cwd}
}

// toolCall is the part of a ToolCall / ToolCallUpdate the policy reads.
// Every field is optional (ToolCallUpdate).
type toolCall struct {
	Kind      json.RawMessage `json:"kind"`
	Title     json.RawMessage `json:"title"`
	Name      json.RawMessage `json:"name"`
	Locations json.RawMessage `json:"locations"`
	RawInput  json.RawMessage `json:"rawInput"`
	Content   json.RawMessage `json:"content"`
	// Meta is the tool call's _meta: agents put what they add there (the
	// tool's name, its input); it is read like rawInput.
	Meta json.RawMessage `json:"_meta"`
}

// permission reads session/request_permission params merged with the
// earlier updates of the same tool call.
func (x *extractor) permission(params json.RawMessage, updates []json.RawMessage) {
	var p struct {
		ToolCall json.RawMessage `json:"toolCall"`
	}
	if err := json.Unmarshal(params, &p); err != nil || len(p.ToolCall) == 0 || string(p.ToolCall) == "null" {
		x.refuse("params", "the request has no toolCall", KindOther)
		return
	}
	var calls []toolCall
	for i, raw := range append(slices.Clone(updates), p.ToolCall) {
		var tc toolCall
		if err := json.Unmarshal(raw, &tc); err != nil {
			origin := "toolCall"
			if i < len(updates) {
				origin = "tool_call update"
			}
			x.opaque(origin, "the tool call does not decode: "+err.Error(), KindOther)
			continue
		}
		calls = append(calls, tc)
	}
	// Kinds and titles first: every item below carries the declared kinds.
	var kinds []Kind
	for _, tc := range calls {
		if k, ok := decodeOptional[string](x, tc.Kind, "toolCall.kind"); ok && k != "" {
			kind := Kind(k)
			if KindBit(kind) == 0 {
				kind = KindOther // ToolKind: unknown values read as other
			}
			if !slices.Contains(kinds, kind) {
				kinds = append(kinds, kind)
			}
		}
		if t, ok := decodeOptional[string](x, tc.Title, "toolCall.title"); ok && t != "" && !slices.Contains(x.ev.Titles, t) {
			x.ev.Titles = append(x.ev.Titles, t)
		}
		if n, ok := decodeOptional[string](x, tc.Name, "toolCall.name"); ok && n != "" && !slices.Contains(x.ev.Tools, n) {
			x.ev.Tools = append(x.ev.Tools, n)
		}
	}
	// Issue 14 point 4: the stricter reading wins. A declared kind never
	// narrows what the title or the rawInput say the tool does: their
	// kinds are added to every item of the tool call, except the bare
	// item of a call without any (Claude Code's "Update Todos" edits no
	// file).
	declared := slices.Clone(kinds)
	if len(declared) == 0 {
		declared = []Kind{KindOther}
	}
	for _, tc := range calls {
		for _, k := range append(impliedKinds(tc.RawInput), impliedKinds(tc.Meta)...) {
			if !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	for _, t := range x.ev.Titles {
		if k := titleKind(t); k != "" && !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		kinds = []Kind{KindOther}
	}
	// A search reads everything below its path. Agents search with
	// rg-like tools that skip dotfiles (Claude Code's Grep and Glob), so
	// rules that only match hidden names below it do not make it ask.
	recursive := slices.Contains(kinds, KindSearch)
	before := len(x.ev.Items)
	for _, tc := range calls {
		if locs, ok := decodeOptional[[]struct {
			Path string `json:"path"`
		}](x, tc.Locations, "toolCall.locations"); ok {
			for _, l := range locs {
				if l.Path != "" {
					x.toolPath(l.Path, recursive, "locations", nil, kinds)
				}
			}
		}
		if content, ok := decodeOptional[[]struct {
			Type string `json:"type"`
			Path string `json:"path"`
		}](x, tc.Content, "toolCall.content"); ok {
			for _, c := range content {
				if c.Type == "diff" && c.Path != "" {
					x.path(c.Path, false, KindEdit, false, "diff", nil)
				}
			}
		}
		x.rawInput(tc.RawInput, kinds, recursive)
		if meta, ok := decodeOptional[map[string]json.RawMessage](x, tc.Meta, "toolCall._meta"); ok {
			x.unshown = true
			x.rawScan(meta, false, "_meta", kinds, recursive, slices.Contains(kinds, KindFetch),
				cmdCtx{cwds: x.dirs(x.cwd), origin: "_meta"}, 0)
			x.unshown = false
		}
	}
	if slices.Contains(kinds, KindFetch) {
		// Fetch tools often carry their URL in the title or in a prompt.
		texts := slices.Clone(x.ev.Titles)
		for _, tc := range calls {
			var m map[string]json.RawMessage
			if json.Unmarshal(tc.RawInput, &m) == nil {
				for _, v := range m {
					var s string
					if json.Unmarshal(v, &s) == nil {
						texts = append(texts, s)
					}
				}
			}
		}
		for _, t := range texts {
			for _, u := range urlsIn(t) {
				x.url(u, "URL in the tool call")
			}
		}
	}
	if len(x.ev.Items) == before {
		x.add(Item{Type: ItemTool, Origin: "tool call"}, declared...)
	}
	// An execute without a command in its rawInput: the title is what
	// says what it runs (Claude Code's titles are the command line). Its
	// items only make the decision stricter: deny and ask rules see them.
	if slices.Contains(kinds, KindExecute) && !slices.ContainsFunc(calls, func(tc toolCall) bool {
		var m map[string]json.RawMessage
		return json.Unmarshal(tc.RawInput, &m) == nil && len(m["command"]) > 0 && string(m["command"]) != "null"
	}) {
		for _, t := range x.ev.Titles {
			from := len(x.ev.Items)
			x.script(t, cmdCtx{cwds: x.dirs(x.cwd), origin: "title"})
			for i := from; i < len(x.ev.Items); i++ {
				if it := &x.ev.Items[i]; it.Refused == "" && strings.HasPrefix(it.Origin, "title") {
					it.Aux, it.Opaque = true, ""
				}
			}
		}
	}
}

// writeKeys are rawInput fields that carry what a tool writes (Claude
// Code's Write, Edit, MultiEdit and NotebookEdit, Gemini CLI's write_file
// and replace, OpenCode's write and edit, str_replace editors, patches):
// a tool call with one of them edits, whatever its declared kind.
var writeKeys = []string{"content", "contents", "new_string", "newString", "old_string", "oldString",
	"new_str", "old_str", "file_text", "insert_text", "edits", "new_source", "newSource", "patch", "diff",
	"changes", "replace_all", "replaceAll", "edit_mode"}

// moveKeys are rawInput fields naming where a tool moves or copies to.
var moveKeys = []string{"destination", "new_path", "newPath", "dest", "target_path", "targetPath"}

// impliedKinds returns the kinds a tool call's rawInput (or _meta) shows
// it has: its own write and move keys, and those of the objects nested in
// it (OpenCode's edits[], a tool input inside _meta), where "content"
// counts only beside a path (a todo list's items have content too).
func impliedKinds(raw json.RawMessage) []Kind {
	var out []Kind
	impliedKindsIn(raw, true, 0, &out)
	return out
}

func impliedKindsIn(raw json.RawMessage, top bool, depth int, out *[]Kind) {
	if len(raw) == 0 || depth > maxRawDepth {
		return
	}
	addK := func(ks ...Kind) {
		for _, k := range ks {
			if !slices.Contains(*out, k) {
				*out = append(*out, k)
			}
		}
	}
	switch raw[0] {
	case '[':
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) == nil {
			for _, e := range list {
				impliedKindsIn(e, false, depth+1, out)
			}
		}
		return
	case '{':
	default:
		return
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return
	}
	hasPath := false
	for k := range m {
		if classifyRawKey(k) == rawPath {
			hasPath = true
		}
	}
	for k, v := range m {
		if string(v) == "null" {
			continue
		}
		n := normKey(k)
		switch {
		case slices.Contains(writeKeys, k) && (top || hasPath || (n != "content" && n != "contents")):
			addK(KindEdit)
		case rawPatchNames[n] && n != "input":
			addK(KindEdit)
		case n == "input" && strings.Contains(string(v), "*** Begin Patch"):
			addK(KindEdit)
		case slices.Contains(moveKeys, k):
			addK(KindMove, KindEdit)
		}
		impliedKindsIn(v, false, depth+1, out)
	}
}

// titleVerbs are the first words of titles that say a tool changes files.
var titleVerbs = map[string]Kind{"write": KindEdit, "edit": KindEdit, "create": KindEdit, "update": KindEdit,
	"modify": KindEdit, "patch": KindEdit, "apply": KindEdit, "replace": KindEdit, "overwrite": KindEdit,
	"append": KindEdit, "insert": KindEdit, "save": KindEdit, "multiedit": KindEdit, "delete": KindDelete,
	"remove": KindDelete, "move": KindMove, "rename": KindMove}

// titleKind returns the kind a title's first word says, "" if none.
func titleKind(t string) Kind {
	w, _, _ := strings.Cut(strings.TrimSpace(t), " ")
	return titleVerbs[strings.ToLower(strings.TrimRight(w, ":"))]
}

// decodeOptional decodes an optional field; null or absent is !ok, a
// value of the wrong type is recorded as opaque.
func decodeOptional[T any](x *extractor, raw json.RawMessage, origin string) (T, bool) {
	var v T
	if len(raw) == 0 || string(raw) == "null" {
		return v, false
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		x.opaque(origin, origin+" does not decode: "+err.Error(), KindOther)
		return v, false
	}
	return v, true
}

// rawInput reads the rawInput fields DESIGN §6 names (and a few aliases
// real agents use): command (a shell command line, or an argv as Codex
// sends it), path, file_path, filePath, notebook_path, paths, url, cwd.
func (x *extractor) rawInput(raw json.RawMessage, kinds []Kind, recursive bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		// A string or a list: nothing the policy knows how to read, and
		// it may say anything.
		x.opaque("rawInput", "rawInput is not an object the policy can read", KindOther)
		return
	}
	// The directory the tool runs in: cwd (Codex), workdir (Codex's
	// shell tool, OpenCode), directory and dir_path (Gemini's
	// run_shell_command), and their spellings. Every one given is a
	// candidate; a relative one is relative to the session's cwd.
	cwds := x.dirs(x.cwd)
	own, cwdUnknown := x.rawCwds(m, "rawInput", len(m["command"]) > 0)
	if len(own) > 0 {
		cwds = own
	}
	for _, key := range rawPathKeys {
		if p, ok := decodeOptional[string](x, m[key], "rawInput."+key); ok && p != "" {
			x.toolPath(p, recursive, "rawInput."+key, cwds, kinds)
		}
	}
	if ps, ok := decodeOptional[[]string](x, m["paths"], "rawInput.paths"); ok {
		for _, p := range ps {
			if p != "" {
				x.toolPath(p, recursive, "rawInput.paths", cwds, kinds)
			}
		}
	}
	// Codex's patches: changes maps each path to its change.
	if ch := m["changes"]; len(ch) > 0 && ch[0] == '{' {
		if cs, ok := decodeOptional[map[string]json.RawMessage](x, ch, "rawInput.changes"); ok {
			for _, p := range slices.Sorted(maps.Keys(cs)) {
				if p != "" {
					x.toolPath(p, recursive, "rawInput.changes", cwds, kinds)
				}
			}
		}
	}
	if u, ok := decodeOptional[string](x, m["url"], "rawInput.url"); ok && u != "" {
		x.url(u, "rawInput.url")
	}
	if c := m["command"]; len(c) > 0 && string(c) != "null" {
		cx := cmdCtx{cwds: cwds, cwdUnknown: cwdUnknown, origin: "rawInput.command"}
		var line string
		var argv []string
		// args are the command's arguments, whatever shape the command
		// has: a tool may append them to an argv as to a program name.
		extra, _ := decodeOptional[[]string](x, m["args"], "rawInput.args")
		switch {
		case json.Unmarshal(c, &line) == nil:
			if len(extra) > 0 {
				argv = append([]string{line}, extra...)
			} else if strings.TrimSpace(line) != "" {
				x.script(line, cx)
			}
		case json.Unmarshal(c, &argv) == nil:
			if len(argv) > 0 {
				argv = append(argv, extra...)
			} else if len(extra) > 0 {
				x.opaque("rawInput.command", "rawInput.command is an empty list with args", KindExecute)
			}
		default:
			x.opaque("rawInput.command", "rawInput.command is neither a string nor a list of strings", KindExecute)
		}
		if len(argv) > 0 {
			args := make([]arg, len(argv))
			for i, a := range argv {
				args[i] = arg{s: a}
			}
			x.argv(args, cx)
		}
	}
	x.rawScan(m, true, "rawInput", kinds, recursive, slices.Contains(kinds, KindFetch),
		cmdCtx{cwds: cwds, cwdUnknown: cwdUnknown, origin: "rawInput"}, 0)
}

// rawCwds returns the directories the cwd keys of a tool input (m) name
// (each also as the kernel reaches it through symlinks), recording them as
// forms of ${cwd}; unknown: one of them is not a string or names a
// directory only the tool knows (~user, a variable). withCommand: m
// holds a command (dir_path is then where it runs, else a path).
func (x *extractor) rawCwds(m map[string]json.RawMessage, where string, withCommand bool) (own []string, unknown bool) {
	for _, key := range rawCwdKeys {
		if key == "dir_path" && !withCommand {
			continue // Gemini's list_directory: a path, read below
		}
		origin := where + "." + key
		c, ok := decodeOptional[string](x, m[key], origin)
		if !ok || c == "" {
			if len(m[key]) > 0 && string(m[key]) != "null" && !ok {
				unknown = true
			}
			continue
		}
		more, why := x.toolPathForms(c)
		if why != "" {
			x.opaque(origin, fmt.Sprintf("%s %s", origin, why), KindOther)
			unknown = true
			continue
		}
		cands := append([]string{c}, more...)
		if (c == "~" || strings.HasPrefix(c, "~/")) && x.home != "" {
			// A tool may expand ~ or take it as a directory named ~.
			cands = append(cands, x.home+c[1:])
		}
		for _, c := range cands {
			if !path.IsAbs(c) {
				if x.cwd == "" {
					x.opaque(origin, fmt.Sprintf("relative %s %q without a session cwd", origin, c), KindOther)
					unknown = true
					continue
				}
				c = x.cwd + "/" + c
			}
			for _, d := range x.logicalPhysical(c) {
				if !slices.Contains(own, d) {
					own = append(own, d)
					x.addCwd(d)
				}
			}
		}
	}
	return own, unknown
}

// rawCwdKeys are the rawInput fields that name the directory a tool runs
// in (dir_path only beside a command).
var rawCwdKeys = []string{"cwd", "workdir", "working_directory", "workingDirectory", "working_dir", "workDir",
	"directory", "dir", "cwd_path", "dir_path"}

// rawPathKeys are the rawInput fields that hold one path: DESIGN §6's,
// and those of real agents' tools (Gemini CLI's absolute_path and
// dir_path, moves' source and destination).
var rawPathKeys = append([]string{"path", "file_path", "filePath", "notebook_path", "absolute_path", "dir_path",
	"source", "old_path", "oldPath"}, moveKeys...)

// toolPath records a path of a tool call with its declared kinds.
func (x *extractor) toolPath(p string, recursive bool, origin string, cwds []string, kinds []Kind) {
	if len(kinds) == 0 {
		kinds = []Kind{KindOther}
	}
	before := len(x.ev.Items)
	more, why := x.toolPathForms(p)
	if why != "" {
		// The tool, not a shell, reads the path: what it makes of it is
		// not known.
		x.add(Item{Type: ItemPath, Path: p, Origin: origin, Opaque: why}, kinds...)
	}
	x.path(p, false, "", recursive, origin, cwds, kinds...)
	for _, m := range more {
		x.path(m, false, "", recursive, origin, cwds, kinds...)
	}
	for i := before; recursive && i < len(x.ev.Items); i++ {
		x.ev.Items[i].SkipsHidden = true
	}
}

// path records a path item. p may be relative (to each of cwds, or the
// session's cwd when cwds is nil); kind "" means the kinds given in more.
func (x *extractor) path(p string, glob bool, kind Kind, recursive bool, origin string, cwds []string, more ...Kind) {
	if x.full {
		return
	}
	nul := ""
	if i := strings.IndexByte(p, 0); i >= 0 {
		// The system reads a path only up to its first NUL byte (or
		// refuses it): what is before it is the path deny rules see.
		nul = "the path contains a NUL byte"
		if p = p[:i]; p == "" {
			p = "."
		}
	}
	if pseudoDevice(p) {
		// Decided before resolving: /dev/stderr resolves through the
		// descriptors of whoever resolves it (the router's own log file),
		// not the command's (issue 14).
		return
	}
	kinds := more
	if kind != "" {
		// more: the other kinds the path may have (an argument read by
		// shape is read and written).
		kinds = append([]Kind{kind}, more...)
	}
	if len(kinds) == 0 {
		kinds = []Kind{KindOther}
	}
	var fulls []string
	if path.IsAbs(p) {
		fulls = []string{p}
	} else {
		if cwds == nil {
			cwds = x.dirs(x.cwd)
		}
		if len(cwds) == 0 {
			x.add(Item{Type: ItemPath, Path: p, Origin: origin, Opaque: fmt.Sprintf("relative path %q without a working directory", p)}, kinds...)
			return
		}
		for _, b := range cwds {
			fulls = append(fulls, b+"/"+p)
		}
		if (p == "~" || strings.HasPrefix(p, "~/")) && x.home != "" {
			// An argv without a shell keeps ~ as written, but the editor
			// may run it through one: both readings are forms.
			fulls = append(fulls, x.home+p[1:])
		}
	}
	fulls = x.throughLinks(fulls)
	it := Item{Type: ItemPath, Origin: origin, Recursive: recursive, Opaque: nul}
	var expansions []string
	for _, full := range fulls {
		c := path.Clean(full)
		if it.Path == "" {
			it.Path = c
		}
		if !slices.Contains(it.Forms, c) {
			it.Forms = append(it.Forms, c)
		}
		if x.fs != nil {
			r, err := x.fs.Resolve(full)
			if err != nil {
				it.Unresolved = true
			} else if r = path.Clean(r); !slices.Contains(it.Forms, r) {
				it.Forms = append(it.Forms, r)
			}
			if glob {
				if m, err := x.fs.Glob(c); err == nil {
					expansions = append(expansions, m...)
				}
			}
		}
	}
	if len(it.Forms) == 1 && quietPaths[it.Forms[0]] {
		return // writing to /dev/null and the like is not evidence
	}
	x.add(it, kinds...)
	for _, m := range expansions {
		x.path(m, false, kind, recursive, "glob "+p, nil, more...)
	}
}

// pseudoDevice reports whether p, as written, names one of quietPaths or
// /dev/fd/N (the command's own descriptors): harmless, whatever they
// resolve to. Only an absolute path written without . or .. counts, so
// that no symlink can stand in front of it.
func pseudoDevice(p string) bool {
	if !path.IsAbs(p) || strings.Contains(p, "//") || strings.HasSuffix(p, "/") && len(p) > 1 || path.Clean(p) != p {
		return false
	}
	if quietPaths[p] {
		return true
	}
	n, ok := strings.CutPrefix(p, "/dev/fd/")
	return ok && isDigits(n)
}

// quietPaths are device files whose use is never evidence.
var quietPaths = map[string]bool{"/dev/null": true, "/dev/stdin": true, "/dev/stdout": true,
	"/dev/stderr": true, "/dev/tty": true, "/dev/zero": true, "/dev/random": true, "/dev/urandom": true}

// Shown is e without the items no editor shows the user (Unshown: read
// from a tool call's _meta): what a user who approves the tool call
// approved. e itself when it has none.
func (e *Evidence) Shown() *Evidence {
	if !slices.ContainsFunc(e.Items, func(it Item) bool { return it.Unshown }) {
		return e
	}
	c := *e
	c.Items = slices.DeleteFunc(slices.Clone(e.Items), func(it Item) bool { return it.Unshown })
	return &c
}

// Covers reports whether every item of o (a direct fs or terminal call)
// is also an item of e (the approved tool call's evidence): same path
// forms, command or domain, with kinds e had. DESIGN §6: an approval
// covers the direct calls that carry it out when their evidence is a
// subset of what was approved (deny rules are still re-checked by
// deciding o). Opaque and refused items are never covered.
func (e *Evidence) Covers(o *Evidence) bool {
	// An MCP tool call is covered only by what was approved of the same
	// tool over MCP: another tool of the server may do anything else with
	// the same path, and a bare tool item stands for the tool itself.
	mcp := o.Method == acp.MethodMcpMessage
	if mcp && (e.Method != o.Method || len(o.Tools) == 0 || slices.ContainsFunc(o.Tools, func(t string) bool { return !slices.Contains(e.Tools, t) })) {
		return false
	}
	// A command does what it finds where it runs: make reads the Makefile,
	// npm test the package.json, pytest the tests of its directory, none
	// named on its command line. So a command is the approved one only in
	// the working directories it was approved in (the router's own
	// permission request shows them: "... (in DIR)").
	if slices.ContainsFunc(o.Items, func(it Item) bool { return it.Type == ItemCommand }) && !sameSet(o.Cwds, e.Cwds) {
		return false
	}
	for i := range o.Items {
		it := &o.Items[i]
		if it.Aux {
			continue
		}
		if it.Opaque != "" || it.Refused != "" || !slices.ContainsFunc(e.Items, func(a Item) bool {
			return covers(&a, it) || mcp && a.Type == ItemTool && it.Type == ItemTool && a.Opaque == "" && a.Refused == "" && it.kinds&^a.kinds == 0
		}) {
			return false
		}
	}
	return len(o.Items) > 0
}

// sameSet: a and b hold the same strings.
func sameSet(a, b []string) bool {
	return !slices.ContainsFunc(a, func(s string) bool { return !slices.Contains(b, s) }) &&
		!slices.ContainsFunc(b, func(s string) bool { return !slices.Contains(a, s) })
}

func covers(a, b *Item) bool {
	if a.Type != b.Type || a.Opaque != "" || a.Refused != "" || b.kinds&^a.kinds != 0 {
		return false
	}
	switch a.Type {
	case ItemPath:
		// A walk that skips or does not follow covers only the same walk.
		return a.Unresolved == b.Unresolved && (a.Recursive || !b.Recursive) &&
			(!b.Recursive || a.Walk == nil || a.Walk == b.Walk) &&
			!slices.ContainsFunc(b.Forms, func(f string) bool { return !slices.Contains(a.Forms, f) })
	case ItemCommand:
		return slices.Equal(a.Argv, b.Argv) && a.ProgramPath == b.ProgramPath &&
			!slices.ContainsFunc(b.Env, func(n string) bool { return !slices.Contains(a.Env, n) })
	case ItemDomain:
		return a.Domain == b.Domain && !b.DomainInvalid
	}
	return false
}
