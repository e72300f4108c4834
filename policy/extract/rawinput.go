package extract

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
)

// The fields of a tool call's rawInput (and _meta) beyond the ones
// rawInput reads by name. Agents name their tools' inputs as they like
// (OpenCode's multiedit edits[].filePath, Cursor-style target_file,
// Gemini's read_many_files include, Codex's apply_patch input, OpenCode's
// patchText, a fetch tool's urls): a path, URL, command or patch anywhere
// in it is evidence, whatever the key's spelling or depth. rawScan reads
// them by the shape of the key and the value; what it cannot read is
// never made allowable by being ignored.

// maxRawDepth bounds how deep rawScan descends into nested objects and
// lists; below it, the tool call is opaque.
const maxRawDepth = 16

// rawKeyClass is what a rawInput key says its value is.
type rawKeyClass uint8

const (
	rawOther   rawKeyClass = iota // unknown: a value shaped like an absolute path is still a path
	rawText                       // text the tool writes or shows (content, description): never a path
	rawPath                       // a path or a list of paths
	rawURL                        // a URL or a list of URLs
	rawCommand                    // a command line or an argv
	rawPatch                      // a patch: the files it names are written
	rawCwd                        // the directory a command runs in (read by rawInput)
)

// rawTextKeys are keys (normalised: lower case, without _ - and .) whose
// string values are text, not names: file contents, replacement strings,
// descriptions, search patterns and globs relative to a path given
// elsewhere.
var rawTextKeys = map[string]bool{
	"content": true, "contents": true, "newstring": true, "oldstring": true, "newstr": true, "oldstr": true,
	"filetext": true, "inserttext": true, "newsource": true, "text": true, "newtext": true, "oldtext": true,
	"description": true, "title": true, "reason": true, "justification": true, "prompt": true, "query": true,
	"pattern": true, "regex": true, "glob": true, "message": true, "explanation": true, "summary": true,
	"plan": true, "status": true, "activeform": true, "name": true, "type": true, "id": true,
	"toolcallid": true, "callid": true, "turnid": true, "processid": true, "toolname": true,
	"subagenttype": true, "outputmode": true, "fact": true, "language": true, "code": true,
	"replacement": true, "search": true, "replace": true, "body": true, "comment": true,
	"old": true, "new": true, "find": true, "with": true, "before": true, "after": true, "insert": true,
	"value": true, "values": true, "snippet": true, "instruction": true, "instructions": true,
	"expected": true, "example": true, "note": true, "notes": true, "context": true, "label": true,
	"line": true, "lines": true, "codeedit": true, "filter": true,
}

// rawPathNames are keys (normalised) that name files or directories;
// keys ending in one of rawPathSuffixes do too.
var rawPathNames = map[string]bool{
	"path": true, "paths": true, "file": true, "files": true, "filename": true, "filenames": true,
	"source": true, "src": true, "sources": true, "dest": true, "dst": true, "destination": true,
	"target": true, "targets": true, "output": true, "out": true, "outfile": true, "from": true, "to": true,
	"directory": true, "directories": true, "dir": true, "dirs": true, "folder": true, "folders": true,
	"root": true, "location": true, "locations": true, "include": true, "includes": true,
	"notebook": true, "workspace": true, "module": true,
}

var rawPathSuffixes = []string{"path", "paths", "file", "files", "filename", "filenames", "dir", "dirs",
	"directory", "directories", "folder"}

// rawURLSuffixes: keys ending in one of them hold URLs.
var rawURLSuffixes = []string{"url", "urls", "uri", "uris", "href", "endpoint"}

var rawCommandNames = map[string]bool{"command": true, "commands": true, "cmd": true, "cmdline": true,
	"commandline": true, "shellcommand": true, "script": true, "argv": true, "bash": true, "shell": true}

var rawPatchNames = map[string]bool{"patch": true, "patchtext": true, "diff": true, "unifieddiff": true,
	"input": true, "patches": true}

// normKey lowers a key and drops _ - and . (file_path, filePath and
// File-Path are one key).
func normKey(k string) string {
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == '_' || c == '-' || c == '.':
		case 'A' <= c && c <= 'Z':
			b.WriteByte(c + 'a' - 'A')
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func classifyRawKey(k string) rawKeyClass {
	n := normKey(k)
	switch {
	case n == "":
		return rawOther
	case rawPatchNames[n]:
		return rawPatch
	case rawCommandNames[n]:
		return rawCommand
	case rawTextKeys[n]:
		return rawText
	case slices.Contains(rawCwdKeys, k) || n == "cwd" || n == "workdir" || n == "workingdirectory":
		return rawCwd
	}
	for _, s := range rawURLSuffixes {
		if strings.HasSuffix(n, s) {
			return rawURL
		}
	}
	if rawPathNames[n] {
		return rawPath
	}
	for _, s := range rawPathSuffixes {
		if strings.HasSuffix(n, s) {
			return rawPath
		}
	}
	return rawOther
}

// rawTopHandled are the top-level rawInput keys of m rawInput itself
// reads. args is read as the command's arguments only beside a command;
// without one it is a field like any other (an object of the tool's
// arguments is read by its members).
func rawTopHandled(m map[string]json.RawMessage, k string) bool {
	switch k {
	case "args":
		c := m["command"]
		return len(c) > 0 && string(c) != "null"
	case "command", "paths", "url":
		return true
	case "changes":
		return true // an object: read by rawInput; a string: a patch, below
	}
	return slices.Contains(rawPathKeys, k) || slices.Contains(rawCwdKeys, k)
}

// rawScan reads every field of a rawInput (or _meta) object that rawInput
// does not read by name. top: m is the rawInput itself (its named keys
// were read); fetch: the tool fetches, so any URL in any string is a host
// it may contact.
func (x *extractor) rawScan(m map[string]json.RawMessage, top bool, where string, kinds []Kind, recursive, fetch bool, cx cmdCtx, depth int) {
	if depth > maxRawDepth {
		x.opaque(where, "the tool input is nested too deep to read", KindOther)
		return
	}
	hasCommand := false
	for k, v := range m {
		if classifyRawKey(k) == rawCommand && len(v) > 0 && string(v) != "null" {
			hasCommand = true
		}
	}
	if !top && hasCommand {
		// A nested command with its own directory (a tool input inside
		// _meta, a list of commands): its relative paths are below it.
		if own, unknown := x.rawCwds(m, where, true); len(own) > 0 || unknown {
			cx.cwds, cx.cwdUnknown = own, cx.cwdUnknown || unknown
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := m[k]
		if len(v) == 0 || string(v) == "null" {
			continue
		}
		class := classifyRawKey(k)
		if top && rawTopHandled(m, k) && !(slices.Contains(rawCwdKeys, k) && !hasCommand && !slices.Contains(rawPathKeys, k)) {
			// Read by rawInput, except a patch given as changes: "..."
			// and what each change says besides its path (Codex's
			// move_path).
			if k != "changes" {
				continue
			}
			if v[0] == '{' {
				var cs map[string]json.RawMessage
				if json.Unmarshal(v, &cs) == nil {
					for _, p := range slices.Sorted(maps.Keys(cs)) {
						if len(cs[p]) > 0 && cs[p][0] == '{' {
							x.rawValue(cs[p], rawOther, where+".changes["+p+"]", kinds, recursive, fetch, cx, depth+1, false)
						}
					}
				}
				continue
			}
			class = rawPatch
		}
		if class == rawCwd || slices.Contains(rawCwdKeys, k) {
			if hasCommand {
				continue // read by rawCwds
			}
			class = rawPath // no command: the directory is what the tool works on
		}
		x.rawValue(v, class, where+"."+k, kinds, recursive, fetch, cx, depth, false)
	}
}

// rawValue reads one value of class class.
func (x *extractor) rawValue(v json.RawMessage, class rawKeyClass, origin string, kinds []Kind, recursive, fetch bool, cx cmdCtx, depth int, elem bool) {
	switch v[0] {
	case '{':
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) != nil {
			x.opaque(origin, origin+" does not decode", KindOther)
			return
		}
		x.rawScan(m, false, origin, kinds, recursive, fetch, cx, depth+1)
		return
	case '[':
		var list []json.RawMessage
		if json.Unmarshal(v, &list) != nil {
			x.opaque(origin, origin+" does not decode", KindOther)
			return
		}
		if class == rawCommand {
			var argv []string
			if json.Unmarshal(v, &argv) == nil && len(argv) > 0 {
				args := make([]arg, len(argv))
				for i, a := range argv {
					args[i] = arg{s: a}
				}
				ccx := cx
				ccx.origin = origin
				x.argv(args, ccx)
				return
			}
		}
		for _, e := range list {
			if len(e) > 0 && string(e) != "null" {
				x.rawValue(e, class, origin, kinds, recursive, fetch, cx, depth+1, true)
			}
		}
		return
	case '"':
	default:
		return // numbers and booleans name nothing
	}
	var s string
	if json.Unmarshal(v, &s) != nil || s == "" {
		return
	}
	if fetch {
		for _, u := range urlsIn(s) {
			x.url(u, "URL in "+origin)
		}
	}
	switch class {
	case rawText:
		return
	case rawPath:
		x.toolPath(s, recursive, origin, cx.cwds, kinds)
	case rawURL:
		if !strings.Contains(s, "://") && !strings.HasPrefix(strings.ToLower(s), "file:") {
			// A tool that takes a URL may add the scheme itself.
			s = "https://" + s
		}
		x.url(s, origin)
	case rawCommand:
		if strings.TrimSpace(s) != "" {
			ccx := cx
			ccx.origin = origin
			x.script(s, ccx)
		}
	case rawPatch:
		files := patchFiles(s)
		if len(files) == 0 && patchLike(s) {
			// It names files, in a way patchFiles does not read. (Hunks
			// alone patch a file named elsewhere: Codex's unified_diff.)
			x.opaque(origin, origin+" is a patch whose files the router does not read", KindEdit)
			return
		}
		for _, f := range files {
			x.toolPath(f, false, origin+" (patch)", cx.cwds, append(slices.Clone(kinds), KindEdit))
		}
	default:
		// An unknown key whose value is shaped like an absolute path or
		// a file URL: the tool may well act on it. (Not a list's
		// element: lists of such words are argvs, Codex's
		// proposed_execpolicy_amendment, already read as the command.)
		// Only a top-level field: nested objects hold the tool's
		// data (Kimi's edit: {old, new} may be "/usr/bin/python3").
		// An MCP tool's arguments are its input itself, which it may
		// read at any depth ({"options": {"files": ["/etc/shadow"]}}
		// beside an allowed path): every such value is a path there.
		if (x.mcpArgs || !elem && depth == 0) && rawPathShape(s) {
			x.toolPath(s, recursive, origin, cx.cwds, kinds)
		}
	}
}

// rawPathShape reports whether s reads as one absolute path, a home path
// or a file URL (no white space: not a sentence).
func rawPathShape(s string) bool {
	if len(s) > 4096 || strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	return strings.HasPrefix(s, "/") || s == "~" || strings.HasPrefix(s, "~/") ||
		strings.HasPrefix(strings.ToLower(s), "file:")
}

// patchLike reports whether s has the marks of a patch that names files.
func patchLike(s string) bool {
	return strings.Contains(s, "Begin Patch") || strings.Contains(s, "diff --git") ||
		strings.HasPrefix(s, "--- ") || strings.HasPrefix(s, "+++ ") ||
		strings.Contains(s, "\n--- ") || strings.Contains(s, "\n+++ ") || strings.Contains(s, "File:")
}

// patchFiles returns the files a patch names: the apply_patch format's
// "*** Add/Update/Delete File:" and "*** Move to:" (Codex, OpenCode), a
// unified or git diff's ---/+++ names (each with and without its a/ or b/
// prefix: -p0 and -p1) and rename/copy lines. nil: s is not a patch.
func patchFiles(s string) []string {
	if !strings.Contains(s, "\n") {
		return nil
	}
	var out []string
	// Git quotes a name with special characters C-style.
	unquote := func(p string) string {
		p = strings.TrimSpace(p)
		if len(p) > 1 && p[0] == '"' {
			if u, err := strconv.Unquote(p); err == nil {
				return u
			}
		}
		return p
	}
	add := func(p string) {
		p = unquote(p)
		if p == "" || p == "/dev/null" {
			return
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	found := false
	for line := range strings.SplitSeq(s, "\n") {
		line = strings.TrimSuffix(line, "\r")
		// apply_patch parsers trim the lines they read.
		trimmed := strings.TrimSpace(line)
		for _, pre := range []string{"*** Add File:", "*** Update File:", "*** Delete File:", "*** Move to:",
			"*** Move File:", "rename from ", "rename to ", "copy from ", "copy to "} {
			if rest, ok := strings.CutPrefix(trimmed, pre); ok {
				found = true
				add(rest)
			}
		}
		for _, pre := range []string{"--- ", "+++ "} {
			rest, ok := strings.CutPrefix(line, pre)
			if !ok {
				continue
			}
			found = true
			name, _, _ := strings.Cut(rest, "\t")
			name = unquote(name)
			add(name)
			for _, ab := range []string{"a/", "b/"} {
				if r, ok := strings.CutPrefix(name, ab); ok {
					add(r)
				}
			}
		}
		if rest, ok := strings.CutPrefix(line, "diff --git "); ok {
			found = true
			for f := range strings.FieldsSeq(rest) {
				f = unquote(f)
				add(f)
				if len(f) > 2 && (f[:2] == "a/" || f[:2] == "b/") {
					add(f[2:])
				}
			}
		}
	}
	if !found {
		return nil
	}
	if out == nil {
		out = []string{}
	}
	return out
}

// toolPathForms returns the paths a tool may take p to be besides p
// itself, and why p cannot be known ("" if it can): a file: URL is its
// path; $HOME and ${HOME} are the home directory; another variable, or
// ~user, only the tool knows.
func (x *extractor) toolPathForms(p string) (more []string, opaque string) {
	if strings.HasPrefix(strings.ToLower(p), "file:") {
		u, err := url.Parse(p)
		if err != nil || !path.IsAbs(u.Path) || (u.Host != "" && !strings.EqualFold(u.Host, "localhost")) {
			return nil, fmt.Sprintf("the file URL %q", p)
		}
		more = append(more, u.Path)
	}
	if strings.HasPrefix(p, "~") && p != "~" && !strings.HasPrefix(p, "~/") {
		return more, fmt.Sprintf("%q: another user's home directory", p)
	}
	for _, v := range []string{"${HOME}", "$HOME"} {
		if rest, ok := strings.CutPrefix(p, v); ok && (rest == "" || rest[0] == '/') {
			if x.home == "" {
				return more, fmt.Sprintf("%q: a home directory the router does not know", p)
			}
			more = append(more, x.home+rest)
			p = ""
			break
		}
	}
	if i := strings.IndexByte(p, '$'); i >= 0 && i+1 < len(p) {
		if c := p[i+1]; c == '{' || i == 0 && (c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return more, fmt.Sprintf("%q: a variable the tool may expand", p)
		}
	}
	return more, ""
}
