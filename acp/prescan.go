package acp

import (
	"encoding/json"
	"errors"
)

// Prescan names members of one method's params that a Stream reads while
// Classify validates the line, so that the message is scanned once (issue
// 16): the members Names of the params object and the members InNames of
// the object that is its member Names[In] (a session/update's params and
// its update). It is read the way MembersOfValidIn reads it (names match
// exactly after escapes, the last occurrence wins, a Names[In] that is not
// an object has no members). A Prescan is not changed once a Stream has it.
type Prescan struct {
	Method  string
	Names   []string
	In      int
	InNames []string
}

// maxPrescan bounds len(Names)+len(InNames): the spans live in the
// message's own allocation.
const maxPrescan = 24

// Check reports whether p can be used.
func (p *Prescan) Check() error {
	if p.Method == "" || p.In < 0 || p.In >= len(p.Names) || len(p.Names)+len(p.InNames) > maxPrescan {
		return errors.New("acp: Prescan: needs a method, In within Names and at most 24 names (maxPrescan)")
	}
	return nil
}

// prescan is what one line's scan found: the spans of p's members in the
// line (end 0: absent), Names first, then InNames.
type prescan struct {
	p     *Prescan
	ok    bool // the last params member of the line was scanned for p
	spans [maxPrescan][2]uint32
}

// messagePre is a Message with its prescan, in one allocation.
type messagePre struct {
	m   Message
	pre prescan
}

// methodIs reports whether raw, a method member as written, is the string
// method without escapes (a method written with escapes is not prescanned:
// the reader falls back to a second scan).
func methodIs(raw []byte, method string) bool {
	return len(raw) == len(method)+2 && raw[0] == '"' && string(raw[1:len(raw)-1]) == method
}

// nameIs reports whether the member name key, as written, is name.
func nameIs(key []byte, escaped bool, name string) bool {
	if escaped || !ascii(key) {
		return memberName(key) == name
	}
	return string(key) == name
}

// params validates the params object at b[i] (inside the envelope; b is
// shorter than 4 GiB) and records p's members.
func (pre *prescan) params(b []byte, i int) (int, bool) {
	p := pre.p
	n := len(p.Names)
	clear(pre.spans[:n+len(p.InNames)])
	return scanObjectAt(b, i, 2, func(key []byte, escaped bool, v int) (int, bool) {
		var vEnd int
		var ok bool
		if nameIs(key, escaped, p.Names[p.In]) {
			clear(pre.spans[n : n+len(p.InNames)]) // the last occurrence wins
			if b[v] == '{' {
				vEnd, ok = scanObjectAt(b, v, 3, func(k []byte, esc bool, w int) (int, bool) {
					wEnd, ok := scanValue(b, w, 3)
					if ok {
						pre.record(p.InNames, n, k, esc, w, wEnd)
					}
					return wEnd, ok
				})
			} else {
				vEnd, ok = scanValue(b, v, 2)
			}
		} else {
			vEnd, ok = scanValue(b, v, 2)
		}
		if ok {
			pre.record(p.Names, 0, key, escaped, v, vEnd)
		}
		return vEnd, ok
	})
}

// record sets the spans of names (from index base) that the member key
// (as written) matches.
func (pre *prescan) record(names []string, base int, key []byte, escaped bool, v, vEnd int) {
	if escaped || !ascii(key) {
		name := memberName(key)
		for j, s := range names {
			if s == name {
				pre.spans[base+j] = [2]uint32{uint32(v), uint32(vEnd)}
			}
		}
		return
	}
	for j, s := range names {
		if s == string(key) { // compared without a copy
			pre.spans[base+j] = [2]uint32{uint32(v), uint32(vEnd)}
		}
	}
}

// Prescanned fills out (p.Names) and inOut (p.InNames) with what Classify
// read of m's params for p, as MembersOfValidIn(m.Params, p.Names, out,
// p.In, p.InNames, inOut) would, and reports whether it could: m was read
// by a Stream with p, its method is p.Method, its params an object. When it
// reports false, the caller scans m.Params itself.
func (m *Message) Prescanned(p *Prescan, out, inOut []json.RawMessage) bool {
	pre := m.pre
	if pre == nil || pre.p != p || !pre.ok || m.Method != p.Method || len(out) < len(p.Names) || len(inOut) < len(p.InNames) {
		return false
	}
	n := len(p.Names)
	for j := range n + len(p.InNames) {
		var v json.RawMessage
		if sp := pre.spans[j]; sp[1] != 0 {
			v = m.Raw[sp[0]:sp[1]:sp[1]]
		}
		if j < n {
			out[j] = v
		} else {
			inOut[j-n] = v
		}
	}
	return true
}
