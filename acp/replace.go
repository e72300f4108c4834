package acp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Replacement is a string value (or a raw JSON one) written in place of the value at Path:
// member names from the params object down, matched exactly (after
// escapes), as a map decode names them.
type Replacement struct {
	Path  []string
	Value string
	// Raw, when not nil, is written in Value's stead as it is: a JSON
	// value, valid and on one line (the router's options of a permission
	// request, say).
	Raw json.RawMessage
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
		if raw := reps[sp.rep].Raw; raw != nil {
			size += len(raw) - (sp.end - sp.start)
		} else {
			size += len(reps[sp.rep].Value) + 2 - (sp.end - sp.start)
		}
	}
	out := make([]byte, 0, size+16)
	from := 0
	for _, sp := range spans[:n] { // in the line's order: the walk is
		out = append(out, line[from:sp.start]...)
		if raw := reps[sp.rep].Raw; raw != nil {
			out = append(out, raw...)
		} else {
			out = AppendString(out, reps[sp.rep].Value)
		}
		from = sp.end
	}
	return append(out, line[from:]...), true
}

// Rewrite returns obj (a valid JSON object) with each replacement's value
// written at its path: in one pass, every other byte kept, when
// ReplaceInValid can; else set one after the other, in the order given, as
// SetPath sets them (a member that is not there is added). A replacement
// that cannot be set is left out, the others still made, and err says why.
func Rewrite(obj json.RawMessage, reps []Replacement) (json.RawMessage, error) {
	if out, ok := ReplaceInValid(obj, reps); ok {
		return out, nil
	}
	var errs []error
	for _, rep := range reps {
		var v any = rep.Value
		if rep.Raw != nil {
			v = rep.Raw
		}
		out, err := SetPath(obj, rep.Path, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", strings.Join(rep.Path, "."), err))
			continue
		}
		obj = out
	}
	return obj, errors.Join(errs...)
}

// SetPath returns obj with the value at path replaced, every other byte of
// meaning kept: SetField for a path of one member; deeper, the objects on
// the way are decoded and encoded again.
func SetPath(obj json.RawMessage, path []string, value any) (json.RawMessage, error) {
	if len(path) == 1 {
		return SetField(obj, path[0], value)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(obj, &fields); err != nil {
		return nil, err
	}
	inner, err := SetPath(fields[path[0]], path[1:], value)
	if err != nil {
		return nil, err
	}
	fields[path[0]] = inner
	return json.Marshal(fields)
}
