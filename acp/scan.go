package acp

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/bits"
	"unicode/utf8"
)

// A JSON scanner for the hot path (issue 6): Classify validates every line
// and finds the envelope members in one pass, without decoding into a map or
// copying params. It accepts exactly what encoding/json does (json.Valid):
// RFC 8259 grammar, no check of UTF-8 inside strings, at most maxDepth
// nested arrays and objects. FuzzScanValid holds it to that.

// maxDepth is encoding/json's nesting limit (scanner.go maxNestingDepth).
const maxDepth = 10000

// strSafe[c] is true for the bytes a JSON string holds verbatim: not '"',
// not '\\', not a control character.
var strSafe = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// special marks the bytes of x (8 bytes of a string, little-endian) that
// are '"', '\\', below 0x20 or past ASCII (0x80 and up, checked as UTF-8):
// the usual has-zero-byte tricks. It is exact about whether there is one
// and about the lowest one (a borrow only starts at a marked byte and only
// runs upwards), so the first special byte is at
// bits.TrailingZeros64(special(x))/8.
func special(x uint64) uint64 {
	below := (x - lsb*0x20) &^ x
	quote := x ^ (lsb * '"')
	quote = (quote - lsb) &^ quote
	bslash := x ^ (lsb * '\\')
	bslash = (bslash - lsb) &^ bslash
	return (below | quote | bslash | x) & msb
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// scanString validates the string starting at b[i] == '"' and returns the
// index after its closing quote, and whether it holds an escape.
func scanString(b []byte, i int) (end int, escaped, ok bool) {
	i++
	for i+8 <= len(b) {
		m := special(binary.LittleEndian.Uint64(b[i:]))
		if m == 0 {
			i += 8
			continue
		}
		// Each special byte of the word in turn, without loading it
		// again: the escapes of a text (a line break, a quote) come
		// every few bytes.
		next := i + 8
		for m != 0 {
			k := i + bits.TrailingZeros64(m)>>3
			switch b[k] {
			case '"':
				return k + 1, escaped, true
			case '\\':
				escaped = true
				if k+1 >= len(b) {
					return 0, false, false
				}
				switch b[k+1] {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
					k += 2
				case 'u':
					if k+6 > len(b) || !isHex(b[k+2]) || !isHex(b[k+3]) || !isHex(b[k+4]) || !isHex(b[k+5]) {
						return 0, false, false
					}
					k += 6
				default:
					return 0, false, false
				}
			default:
				switch c := b[k]; {
				case c < 0x20: // a control character
					return 0, false, false
				case c >= utf8.RuneSelf:
					// The whole run past ASCII (a CJK text is one), not a
					// rune per pass of the word loop.
					var ok bool
					if k, ok = utf8Run(b, k); !ok {
						return 0, false, false
					}
				default:
					k++ // special marks only its lowest byte exactly
				}
			}
			if k >= next {
				next = k // the escape ran past the word
				break
			}
			m &^= uint64(1)<<(uint(k-i)*8) - 1 // the marks before k
		}
		i = next
	}
	for ; i < len(b); i++ {
		switch c := b[i]; {
		case c >= utf8.RuneSelf:
			var ok bool
			if i, ok = utf8Run(b, i); !ok {
				return 0, false, false
			}
			i-- // the loop's i++
		case strSafe[c]:
		case c == '"':
			return i + 1, escaped, true
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				return 0, false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return 0, false, false
				}
				i += 5
			default:
				return 0, false, false
			}
		default:
			return 0, false, false
		}
	}
	return 0, false, false
}

// utf8Run returns the index after the run of bytes past ASCII at b[k],
// and false when the run is not UTF-8 (RFC 8259 §8.1: JSON text is UTF-8;
// a peer that reads its input strictly as UTF-8, as the Rust ACP crate's
// read_line does, fails on the line or ends the whole connection). The
// sequences of two and three bytes that need no range check past their
// lead (Latin, Greek, Cyrillic; CJK) are checked inline, the rest by
// utf8.DecodeRune.
func utf8Run(b []byte, k int) (int, bool) {
	for k < len(b) {
		c := b[k]
		switch {
		case c < utf8.RuneSelf:
			return k, true
		case 0xC2 <= c && c <= 0xDF:
			if k+1 < len(b) && b[k+1]&0xC0 == 0x80 {
				k += 2
				continue
			}
			return k, false
		case 0xE1 <= c && c <= 0xEC || c == 0xEE || c == 0xEF:
			if k+2 < len(b) && b[k+1]&0xC0 == 0x80 && b[k+2]&0xC0 == 0x80 {
				k += 3
				continue
			}
			return k, false
		}
		r, n := utf8.DecodeRune(b[k:])
		if r == utf8.RuneError && n <= 1 {
			return k, false
		}
		k += n
	}
	return k, true
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// scanNumber validates the number starting at b[i] ('-' or a digit).
func scanNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return 0, false
		}
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return 0, false
		}
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	return i, true
}

func scanLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// scanValue validates the value starting at b[i] (no leading space) inside
// depth open containers and returns the index after it.
func scanValue(b []byte, i, depth int) (int, bool) {
	// open holds the containers opened here, innermost last: '{' or '['.
	var stack [64]byte
	open := stack[:0]
	var ok bool
	for {
		// A value.
		if i >= len(b) {
			return 0, false
		}
		switch c := b[i]; c {
		case '"':
			if i, _, ok = scanString(b, i); !ok {
				return 0, false
			}
		case '{', '[':
			if depth+len(open)+1 > maxDepth {
				return 0, false
			}
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' or ']'
				i, ok = i+1, true
				break
			}
			open = append(open, c)
			if c == '{' {
				if i, ok = scanKey(b, i); !ok {
					return 0, false
				}
			}
			continue
		case 't':
			i, ok = scanLiteral(b, i, "true")
		case 'f':
			i, ok = scanLiteral(b, i, "false")
		case 'n':
			i, ok = scanLiteral(b, i, "null")
		default:
			if c != '-' && !isDigit(c) {
				return 0, false
			}
			i, ok = scanNumber(b, i)
		}
		if !ok {
			return 0, false
		}
		// After a value: close containers until another value is due.
		for {
			if len(open) == 0 {
				return i, true
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return 0, false
			}
			top := open[len(open)-1]
			if b[i] == top+2 {
				open = open[:len(open)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return 0, false
			}
			i = skipSpace(b, i+1)
			if top == '{' {
				if i, ok = scanKey(b, i); !ok {
					return 0, false
				}
			}
			break
		}
	}
}

// scanKey validates `"key" :` and spaces at b[i] and returns the index of
// the member's value.
func scanKey(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	i, _, ok := scanString(b, i)
	if !ok {
		return 0, false
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return 0, false
	}
	return skipSpace(b, i+1), true
}

// validJSON is json.Valid.
func validJSON(b []byte) bool {
	i, ok := scanValue(b, skipSpace(b, 0), 0)
	return ok && skipSpace(b, i) == len(b)
}

// members are the envelope members of a JSON-RPC line, as spans of it
// (nil when absent), and the first member whose name differs from one of
// them only in case.
type members struct {
	jsonrpc, id, method, params, result, error []byte
	folded, foldedAs                           string
	paramsAt                                   int  // where params starts in the line
	paramsDup                                  bool // params is given more than once
}

// scan outcomes.
const (
	scanMembers   = iota // an object (or null: no members)
	scanNotObject        // valid JSON, another type
	scanInvalid          // not JSON
)

// scanObject validates the object that b holds (spaces around it allowed)
// and calls fn for each member in order: its name as written (quotes
// stripped, escapes not resolved), whether that has escapes, and the span
// of its value. It returns the span of the object itself; ok is false when
// b is not valid JSON or not an object.
func scanObject(b []byte, fn func(key []byte, escaped bool, vStart, vEnd int)) (start, end int, ok bool) {
	start = skipSpace(b, 0)
	end, ok = scanObjectAt(b, start, 1, func(key []byte, escaped bool, v int) (int, bool) {
		vEnd, ok := scanValue(b, v, 1)
		if ok {
			fn(key, escaped, v, vEnd)
		}
		return vEnd, ok
	})
	if !ok || skipSpace(b, end) != len(b) {
		return 0, 0, false
	}
	return start, end, true
}

// scanObjectAt validates the object at b[i], which is the depth-th open
// container (the outermost is 1), and returns the index after it. value
// validates each member's value, starting at its index, and returns the
// index after it; it is given the member's name as written (quotes
// stripped, escapes not resolved) and whether that has escapes. A value
// inside the object is inside depth containers (scanValue's depth).
func scanObjectAt(b []byte, i, depth int, value func(key []byte, escaped bool, v int) (int, bool)) (int, bool) {
	if i >= len(b) || b[i] != '{' || depth > maxDepth {
		return 0, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, false
		}
		keyEnd, escaped, ok := scanString(b, i)
		if !ok {
			return 0, false
		}
		key := b[i+1 : keyEnd-1]
		i = skipSpace(b, keyEnd)
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		i = skipSpace(b, i+1)
		vEnd, ok := value(key, escaped, i)
		if !ok {
			return 0, false
		}
		i = skipSpace(b, vEnd)
		if i >= len(b) {
			return 0, false
		}
		if b[i] == '}' {
			return i + 1, true
		}
		if b[i] != ',' {
			return 0, false
		}
		i = skipSpace(b, i+1)
	}
}

// memberName resolves the escapes of a member name as written (and
// replaces invalid UTF-8), as a map decode does. Only for names that need
// it: escaped or not ASCII.
func memberName(key []byte) string {
	var name string
	json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &name) // valid: scanString accepted it
	return name
}

// scanEnvelope validates line and reads its top-level members. A member
// given twice counts as its last occurrence, as encoding/json reads it.
// With pre.p set, the params of a pre.p.Method message are read for it
// (prescan.go) when the method comes first.
func scanEnvelope(line []byte, pre *prescan) (members, int) {
	var m members
	i := skipSpace(line, 0)
	if i >= len(line) {
		return m, scanInvalid
	}
	if line[i] != '{' {
		end, ok := scanValue(line, i, 0)
		switch {
		case !ok || skipSpace(line, end) != len(line):
			return m, scanInvalid
		case line[i] == 'n': // null decodes into a nil map
			return m, scanMembers
		}
		return m, scanNotObject
	}
	end, ok := scanObjectAt(line, i, 1, func(key []byte, escaped bool, v int) (int, bool) {
		var vEnd int
		var ok bool
		if pre.p != nil && nameIs(key, escaped, "params") {
			// The last params member is the one read, for its method
			// as given so far (Prescanned checks the final method).
			pre.ok = false
			if line[v] == '{' && len(line) < 1<<32 && methodIs(m.method, pre.p.Method) {
				vEnd, ok = pre.params(line, v)
				pre.ok = ok
			} else {
				vEnd, ok = scanValue(line, v, 1)
			}
		} else {
			vEnd, ok = scanValue(line, v, 1)
		}
		if ok {
			m.set(key, escaped, line[v:vEnd:vEnd], v)
		}
		return vEnd, ok
	})
	if !ok || skipSpace(line, end) != len(line) {
		return m, scanInvalid
	}
	return m, scanMembers
}

// set records one top-level member. key is the name as written (quotes
// stripped, escapes not yet resolved).
func (m *members) set(key []byte, escaped bool, v []byte, at int) {
	if escaped || !ascii(key) {
		// Rare: resolve escapes (and replace invalid UTF-8) exactly as the
		// map decode did.
		name := memberName(key)
		if !m.setExact([]byte(name), v, at) && m.folded == "" {
			if as := foldedMember(name); as != "" {
				m.folded, m.foldedAs = name, as
			}
		}
		return
	}
	if m.setExact(key, v, at) || m.folded != "" {
		return
	}
	switch len(key) {
	case len("id"), len("error"), len("method"), len("jsonrpc"): // "params", "result": 6 too
		if as := foldedMember(string(key)); as != "" {
			m.folded, m.foldedAs = string(key), as
		}
	}
}

func (m *members) setExact(name, v []byte, at int) bool {
	switch string(name) {
	case "jsonrpc":
		m.jsonrpc = v
	case "id":
		m.id = v
	case "method":
		m.method = v
	case "params":
		m.paramsDup = m.params != nil
		m.params, m.paramsAt = v, at
	case "result":
		m.result = v
	case "error":
		m.error = v
	default:
		return false
	}
	return true
}

func ascii(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// knownMethods are the method names Classify returns without allocating.
var knownMethods = [...]string{
	MethodSessionUpdate, MethodSessionPrompt, MethodSessionCancel, MethodCancelRequest,
	MethodRequestPermission, MethodReadTextFile, MethodWriteTextFile,
	MethodTerminalCreate, MethodTerminalOutput, MethodTerminalWaitForExit, MethodTerminalKill, MethodTerminalRelease,
	MethodInitialize, MethodAuthenticate, MethodLogout,
	MethodSessionNew, MethodSessionLoad, MethodSessionResume, MethodSessionList, MethodSessionDelete,
	MethodSessionClose, MethodSessionFork, MethodSetMode, MethodSetConfigOption, MethodSetModel,
	MethodElicitationCreate, MethodElicitationComplete,
}

// methodName decodes a method member as json.Unmarshal into a string does;
// ok is false when it is not a string (null decodes to "").
func methodName(raw []byte) (string, bool) {
	if len(raw) >= 2 && raw[0] == '"' {
		s := raw[1 : len(raw)-1]
		if verbatim(s) {
			for _, k := range knownMethods {
				if string(s) == k {
					return k, true
				}
			}
			return string(s), true
		}
	}
	var name string
	if json.Unmarshal(raw, &name) != nil {
		return "", false
	}
	return name, true
}

// verbatim reports whether b, put between quotes, is a JSON string that
// decodes to b itself: no quote, backslash or control character, valid
// UTF-8.
func verbatim(b []byte) bool {
	for _, c := range b {
		if !strSafe[c] {
			return false
		}
	}
	return utf8.Valid(b)
}

// Members reads several members of the JSON object obj in one pass, without
// decoding them: out[i] is the raw value of the member named exactly
// names[i] (its last occurrence, as a map decode reads it; escapes in names
// resolved), nil when there is none. Values alias obj. It fails when obj is
// not a valid JSON object; "null" has no members.
//
// It is how to read a few small members of a large message (a
// session/update's ids beside 1 MiB of content) without running
// encoding/json over all of it; unlike a struct decode, names are matched
// exactly, as the peer reading the same message matches them.
func Members(obj json.RawMessage, names []string, out []json.RawMessage) error {
	if len(out) < len(names) {
		return errors.New("acp: Members: out is shorter than names")
	}
	clear(out[:len(names)])
	if i := skipSpace(obj, 0); i < len(obj) && obj[i] == 'n' {
		if end, ok := scanLiteral(obj, i, "null"); ok && skipSpace(obj, end) == len(obj) {
			return nil
		}
	}
	_, _, ok := scanObject(obj, func(k []byte, escaped bool, vStart, vEnd int) {
		setMember(names, out, k, escaped, obj[vStart:vEnd:vEnd])
	})
	if !ok {
		return errNotObject
	}
	return nil
}

// setMember stores v as out[i] for each names[i] equal to the member name
// key as written (escaped: it holds escapes to resolve first).
func setMember(names []string, out []json.RawMessage, key []byte, escaped bool, v json.RawMessage) {
	if escaped || !ascii(key) {
		name := memberName(key)
		for i, n := range names {
			if n == name {
				out[i] = v
			}
		}
		return
	}
	for i, n := range names {
		if n == string(key) { // compared without a copy
			out[i] = v
		}
	}
}

// MembersOfValid is Members for an object known to be valid JSON: part of a
// line the Stream classified (Message.Params, Result, Error), which was
// validated once already. It finds where values end without checking them
// (the end of a string with bytes.IndexByte), so reading the ids beside
// 1 MiB of content costs a fraction of a validating pass. On input that is
// not valid JSON it returns an error or wrong spans, never panics.
func MembersOfValid(obj json.RawMessage, names []string, out []json.RawMessage) error {
	if len(out) < len(names) {
		return errors.New("acp: MembersOfValid: out is shorter than names")
	}
	clear(out[:len(names)])
	_, err := eachMemberOfValid(obj, func(key []byte, escaped bool, i int) (int, bool) {
		vEnd, ok := valueEnd(obj, i)
		if ok {
			setMember(names, out, key, escaped, obj[i:vEnd:vEnd])
		}
		return vEnd, ok
	})
	return err
}

// MembersOfValidIn is MembersOfValid of obj and, in the same pass, of the
// object that is obj's member names[in]: its members named inNames go to
// inOut (nil when names[in] is absent or not an object). A member of a 1 MiB
// update's params is then found with one scan of the line, not two.
func MembersOfValidIn(obj json.RawMessage, names []string, out []json.RawMessage, in int, inNames []string, inOut []json.RawMessage) error {
	if len(out) < len(names) || len(inOut) < len(inNames) || in < 0 || in >= len(names) {
		return errors.New("acp: MembersOfValidIn: out is shorter than names")
	}
	_, err := membersOfValidIn(obj, names, out, in, inNames, inOut)
	return err
}

// ParamsOfValid is MembersOfValidIn of p's names in the params of line, a
// valid JSON-RPC message (one the router validated and stored), in one
// pass over the line: out and inOut are as Message.Prescanned fills them.
// It fails when params is absent or not an object.
func ParamsOfValid(line []byte, p *Prescan, out, inOut []json.RawMessage) error {
	if len(out) < len(p.Names) || len(inOut) < len(p.InNames) || p.In < 0 || p.In >= len(p.Names) {
		return errors.New("acp: ParamsOfValid: out is shorter than names")
	}
	found := false
	_, err := eachMemberOfValid(line, func(key []byte, escaped bool, i int) (int, bool) {
		if !nameIs(key, escaped, "params") {
			return valueEnd(line, i)
		}
		// The last occurrence wins.
		found = i < len(line) && line[i] == '{'
		if !found {
			return valueEnd(line, i)
		}
		end, err := membersOfValidIn(line[i:], p.Names, out, p.In, p.InNames, inOut)
		return i + end, err == nil
	})
	if err == nil && !found {
		err = errNotObject
	}
	return err
}

// UpdateKindOfValid returns the sessionUpdate of a session/update line
// the router validated and stored (params.update.sessionUpdate), as
// written between its quotes. It reads the line only up to that member: at
// each level it takes the first member of that name and stops there, so
// that the update's content (up to megabytes) is not scanned. ok is false
// when the member is not there or is not a string without escapes (the
// caller then reads the line in full). A line that names a member twice is
// read here by its first, by ParamsOfValid by its last.
func UpdateKindOfValid(line []byte) ([]byte, bool) {
	b := line
	for _, name := range [...]string{"params", "update", "sessionUpdate"} {
		i, ok := firstMemberOfValid(b, name)
		if !ok {
			return nil, false
		}
		b = b[i:]
	}
	end, ok := valueEnd(b, 0)
	if !ok || end < 2 || b[0] != '"' || bytes.IndexByte(b[1:end-1], '\\') >= 0 {
		return nil, false
	}
	return b[1 : end-1], true
}

// firstMemberOfValid returns where the value of the first member named
// name of the valid object b starts, without reading further.
func firstMemberOfValid(b []byte, name string) (int, bool) {
	at := -1
	eachMemberOfValid(b, func(key []byte, escaped bool, i int) (int, bool) {
		if nameIs(key, escaped, name) {
			at = i
			return 0, false // stop: eachMemberOfValid returns an error
		}
		return valueEnd(b, i)
	})
	return at, at >= 0
}

// membersOfValidIn is MembersOfValidIn, also returning where obj's value
// ends.
func membersOfValidIn(obj json.RawMessage, names []string, out []json.RawMessage, in int, inNames []string, inOut []json.RawMessage) (int, error) {
	clear(out[:len(names)])
	clear(inOut[:len(inNames)])
	inner := names[in]
	return eachMemberOfValid(obj, func(key []byte, escaped bool, i int) (int, bool) {
		isInner := nameIs(key, escaped, inner)
		if isInner && i < len(obj) && obj[i] == '{' {
			// The last occurrence wins, as in a map decode.
			clear(inOut[:len(inNames)])
			vEnd, err := eachMemberOfValid(obj[i:], func(k []byte, esc bool, j int) (int, bool) {
				v := obj[i:]
				end, ok := valueEnd(v, j)
				if ok {
					setMember(inNames, inOut, k, esc, v[j:end:end])
				}
				return end, ok
			})
			if err != nil {
				return 0, false
			}
			vEnd += i
			setMember(names, out, key, escaped, obj[i:vEnd:vEnd])
			return vEnd, true
		}
		if isInner {
			clear(inOut[:len(inNames)]) // not an object: it has no members
		}
		vEnd, ok := valueEnd(obj, i)
		if ok {
			setMember(names, out, key, escaped, obj[i:vEnd:vEnd])
		}
		return vEnd, ok
	})
}

// eachMemberOfValid calls value for each member of the valid object b
// with its name as written (escaped: with escapes to resolve) and where its
// value starts; value returns where the value ends. It returns the index
// after the object ("null": no members, its end).
func eachMemberOfValid(b []byte, value func(key []byte, escaped bool, i int) (int, bool)) (int, error) {
	i := skipSpace(b, 0)
	if i < len(b) && b[i] == 'n' {
		return i + 4, nil // null: Classify accepted it, so it is "null"
	}
	if i >= len(b) || b[i] != '{' {
		return 0, errNotObject
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, errNotObject
		}
		keyEnd, ok := stringEnd(b, i)
		if !ok {
			return 0, errNotObject
		}
		key := b[i+1 : keyEnd-1]
		i = skipSpace(b, keyEnd)
		if i >= len(b) || b[i] != ':' {
			return 0, errNotObject
		}
		i = skipSpace(b, i+1)
		vEnd, ok := value(key, bytes.IndexByte(key, '\\') >= 0, i)
		if !ok || vEnd <= i || vEnd > len(b) {
			return 0, errNotObject
		}
		i = skipSpace(b, vEnd)
		if i >= len(b) {
			return 0, errNotObject
		}
		if b[i] == '}' {
			return i + 1, nil
		}
		if b[i] != ',' {
			return 0, errNotObject
		}
		i = skipSpace(b, i+1)
	}
}

// EachElementOfValid calls fn with each element of the valid JSON array
// arr (a member MembersOfValid found), in order, until fn returns false. It
// fails when arr is not an array; "null" has no elements.
func EachElementOfValid(arr json.RawMessage, fn func(elem json.RawMessage) bool) error {
	b := arr
	i := skipSpace(b, 0)
	if i < len(b) && b[i] == 'n' {
		return nil
	}
	if i >= len(b) || b[i] != '[' {
		return errors.New("acp: not an array")
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return nil
	}
	for {
		end, ok := valueEnd(b, i)
		if !ok {
			return errors.New("acp: not an array")
		}
		if !fn(b[i:end:end]) {
			return nil
		}
		i = skipSpace(b, end)
		switch {
		case i >= len(b):
			return errors.New("acp: not an array")
		case b[i] == ']':
			return nil
		case b[i] != ',':
			return errors.New("acp: not an array")
		}
		i = skipSpace(b, i+1)
	}
}

// stringEnd returns the index after the closing quote of the valid string
// at b[i] == '"': the first quote not escaped by an odd run of backslashes.
// Quotes are found eight bytes at a time (the has-zero-byte trick of
// special, for one byte value): cheaper than special, and than
// bytes.IndexByte on code, where escaped quotes come every few bytes.
func stringEnd(b []byte, i int) (int, bool) {
	j := i + 1
	for {
		for j+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[j:]) ^ (lsb * '"')
			if m := (x - lsb) &^ x & msb; m != 0 {
				j += bits.TrailingZeros64(m) >> 3
				break
			}
			j += 8
		}
		for j < len(b) && b[j] != '"' {
			j++
		}
		if j >= len(b) {
			return 0, false
		}
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1, true
		}
		j++
	}
}

// valueEnd returns the index after the valid JSON value at b[i].
func valueEnd(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end, ok := stringEnd(b, i)
				if !ok {
					return 0, false
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	}
	// A number or a literal: it ends where the enclosing value goes on.
	j := i
	for j < len(b) && !isSpace(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
		j++
	}
	return j, j > i
}
