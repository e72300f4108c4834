package acp

import (
	"bytes"
	"encoding/json"
	"unicode"
	"unicode/utf8"
)

// AmbiguousMember finds an object in v (valid JSON, at any depth) with two
// members that name the same field for encoding/json's decoding into a
// struct, which matches a member name to a field's case-insensitively
// (bytes.EqualFold, after escapes: "path", "PATH", "pa\u0074h";
// "sessionId" and "\u017fessionId", U+017F folding to s), the last one
// winning. A peer written in JavaScript, Rust or Python reads the exactly
// named member (or refuses the message), so with such a pair the router and
// the peer may act on different values: the policy would decide one path
// and the editor read another. An exact duplicate counts too (peers differ
// on which one wins). It returns the two names as written, in order.
func AmbiguousMember(v json.RawMessage) (first, second string, found bool) {
	var a ambiguity
	a.value(v, skipSpace(v, 0))
	return a.first, a.second, a.found
}

// FoldedMember finds a member of the object obj (valid JSON; its own
// members, not deeper) whose name folds to one of names without being it
// ("Path"; "pat\u0068" is "path": escapes are resolved). A decoder that
// ignores case reads it as that field, a peer that matches names exactly
// (the editor) does not, so that the two read different things from one
// message: a path the editor never sees, args that make a command line a
// program's name. For objects whose members the schema fixes. It returns
// the name it folds to and the name as written.
func FoldedMember(obj json.RawMessage, names ...string) (want, got string, found bool) {
	eachMemberOfValid(obj, func(key []byte, escaped bool, i int) (int, bool) {
		name := string(key)
		if escaped || !ascii(key) {
			name = memberName(key)
		}
		f := foldName(name)
		for _, n := range names {
			if name != n && f == foldName(n) {
				want, got, found = n, name, true
				return 0, false // stop
			}
		}
		return valueEnd(obj, i)
	})
	return want, got, found
}

// ambiguity walks a valid JSON value for AmbiguousMember.
type ambiguity struct {
	first, second string
	found         bool
}

// value walks the value at b[i] and returns the index after it.
func (a *ambiguity) value(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '{':
		return a.object(b, i)
	case '[':
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1
		}
		for i < len(b) && !a.found {
			i = skipSpace(b, a.value(b, i))
			if i >= len(b) || b[i] == ']' {
				return i + 1
			}
			i = skipSpace(b, i+1) // the comma
		}
		return len(b)
	}
	end, ok := valueEnd(b, i)
	if !ok {
		return len(b)
	}
	return end
}

// object walks the object at b[i] == '{': each name, then its value.
func (a *ambiguity) object(b []byte, i int) int {
	var names [8]string // most objects have few members: folded without a map
	folded := names[:0]
	var written []string
	var seen map[string]string
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for i < len(b) && !a.found {
		keyEnd, ok := stringEnd(b, i)
		if !ok {
			return len(b)
		}
		key := b[i+1 : keyEnd-1]
		name := string(key)
		if !ascii(key) || bytes.IndexByte(key, '\\') >= 0 {
			name = memberName(key)
		}
		f := foldName(name)
		switch {
		case seen != nil:
			if prev, dup := seen[f]; dup {
				a.first, a.second, a.found = prev, name, true
			}
			seen[f] = name
		case len(folded) < cap(names):
			for k, g := range folded {
				if g == f {
					a.first, a.second, a.found = written[k], name, true
				}
			}
			folded = append(folded, f)
			written = append(written, name)
		default: // a large object: a map
			seen = make(map[string]string, 2*len(folded))
			for k, g := range folded {
				seen[g] = written[k]
			}
			if prev, dup := seen[f]; dup {
				a.first, a.second, a.found = prev, name, true
			}
			seen[f] = name
		}
		i = skipSpace(b, keyEnd)
		i = skipSpace(b, i+1) // the colon
		i = skipSpace(b, a.value(b, i))
		if i >= len(b) || b[i] == '}' {
			return i + 1
		}
		i = skipSpace(b, i+1) // the comma
	}
	return len(b)
}

// foldName maps name to one representative of its case-folding class:
// each rune to the smallest rune of its unicode.SimpleFold orbit (an ASCII
// letter's is its upper case: 'K' for k and the Kelvin sign, 'S' for s and
// the long s), the equivalence bytes.EqualFold tests rune by rune, and
// encoding/json's field matching with it.
func foldName(name string) string {
	lower := false
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= utf8.RuneSelf {
			return foldRunes(name)
		}
		lower = lower || 'a' <= c && c <= 'z'
	}
	if !lower {
		return name
	}
	b := []byte(name)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func foldRunes(name string) string {
	out := make([]rune, 0, len(name))
	for _, r := range name {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		out = append(out, least)
	}
	return string(out)
}
