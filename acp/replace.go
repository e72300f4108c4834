package acp

import "encoding/json"

// Replacement is a string value written in place of the value at Path:
// member names from the params object down, matched exactly (after
// escapes), as a map decode names them.
type Replacement struct {
	Path  []string
	Value string
}

// maxReplaced bounds the values ReplaceInParams replaces in one line (a
// member given more than once counts each time).
const maxReplaced = 16

// ReplaceInParams returns m's line with each replacement's value written
// at its path in the params, every other byte of the line kept as the peer
// sent it, in one pass over the params and one copy: how the relay
// rewrites the ids of an update it otherwise forwards untouched (a session
// id, a tool call id). A leaf member given more than once has each of its
// values replaced (as SetField does). ok is false, and the caller takes
// its slow path, when a path is not there in full, when it goes through a
// member given more than once or a value that is not an object, or when m
// is not a line Classify read (or its params member is given twice).
func (m *Message) ReplaceInParams(reps []Replacement) (line []byte, ok bool) {
	p := m.Params
	if len(p) == 0 || p[0] != '{' || m.paramsAt < 0 || m.paramsAt+len(p) > len(m.Raw) || &m.Raw[m.paramsAt] != &p[0] {
		return nil, false
	}
	return replaceIn(m.Raw, m.paramsAt, p, reps)
}

// ReplaceInValid is ReplaceInParams for an object known to be valid JSON
// (params of a line the Stream classified, or built from one by splicing):
// it returns obj with the replacements' values written at their paths.
func ReplaceInValid(obj json.RawMessage, reps []Replacement) (json.RawMessage, bool) {
	if len(obj) == 0 || obj[0] != '{' {
		return nil, false
	}
	return replaceIn(obj, 0, obj, reps)
}

// replaceIn is ReplaceInParams of the object p at offset at in line.
func replaceIn(line []byte, at int, p []byte, reps []Replacement) ([]byte, bool) {
	var spans [maxReplaced]struct{ start, end, rep int }
	n := 0
	var found [maxReplaced]bool
	if len(reps) > maxReplaced {
		return nil, false
	}
	// walk finds, in the object at the start of obj (at base in the
	// line) at depth, the values of the replacements whose path goes
	// through it, and returns where the object ends.
	var walk func(obj []byte, base, depth int) (int, bool)
	walk = func(obj []byte, base, depth int) (int, bool) {
		var seen [maxReplaced]bool // the inner members already gone into
		end, err := eachMemberOfValid(obj, func(key []byte, escaped bool, i int) (int, bool) {
			var name string
			if escaped || !ascii(key) {
				name = memberName(key)
			}
			inner, leaf := false, false
			for r, rep := range reps {
				if len(rep.Path) <= depth {
					continue
				}
				if name != "" && name != rep.Path[depth] || name == "" && string(key) != rep.Path[depth] {
					continue
				}
				if len(rep.Path) > depth+1 {
					if seen[r] {
						return 0, false // a member given twice on the way
					}
					seen[r], inner = true, true
					continue
				}
				if leaf || n == maxReplaced {
					return 0, false // two replacements of one value
				}
				end, ok := valueEnd(obj, i)
				if !ok {
					return 0, false
				}
				spans[n] = struct{ start, end, rep int }{base + i, base + end, r}
				n++
				found[r], leaf = true, true
			}
			switch {
			case inner && leaf:
				return 0, false // one replacement inside another's value
			case !inner:
				return valueEnd(obj, i)
			case i >= len(obj) || obj[i] != '{':
				return 0, false
			}
			end, ok := walk(obj[i:], base+i, depth+1)
			return i + end, ok
		})
		return end, err == nil
	}
	if _, ok := walk(p, at, 0); !ok {
		return nil, false
	}
	for r := range reps {
		if !found[r] {
			return nil, false
		}
	}
	size := len(line)
	for _, sp := range spans[:n] {
		size += len(reps[sp.rep].Value) + 2 - (sp.end - sp.start)
	}
	out := make([]byte, 0, size+16)
	from := 0
	for _, sp := range spans[:n] { // in the line's order: the walk is
		out = append(out, line[from:sp.start]...)
		out = AppendString(out, reps[sp.rep].Value)
		from = sp.end
	}
	return append(out, line[from:]...), true
}
