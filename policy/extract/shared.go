package extract

import (
	"net/netip"
	"slices"
	"strings"

	"golang.org/x/net/idna"
)

// What the decision core (package policy) reads of an item besides its
// exported fields: its kinds, the path variables of its request, and the
// normal form of an argv that command patterns are matched against. They
// are defined here, where the items are made, so that the core depends on
// the reader and never the other way round.

// Kind is an ACP ToolKind (schema ToolKind).
type Kind string

const (
	KindRead       Kind = "read"
	KindEdit       Kind = "edit"
	KindDelete     Kind = "delete"
	KindMove       Kind = "move"
	KindSearch     Kind = "search"
	KindExecute    Kind = "execute"
	KindThink      Kind = "think"
	KindFetch      Kind = "fetch"
	KindSwitchMode Kind = "switch_mode"
	KindOther      Kind = "other"
)

// AllKinds lists the ToolKinds in schema order; a kind's bit in a KindSet
// is its index here.
var AllKinds = []Kind{KindRead, KindEdit, KindDelete, KindMove, KindSearch, KindExecute, KindThink,
	KindFetch, KindSwitchMode, KindOther}

// KindSet is a set of kinds, one bit per entry of AllKinds.
type KindSet uint16

func KindBit(k Kind) KindSet {
	for i, x := range AllKinds {
		if x == k {
			return 1 << i
		}
	}
	return 0
}

// Below returns p relative to base ("" for base itself).
func Below(base, p string) (string, bool) {
	switch {
	case p == base:
		return "", true
	case base == "/":
		return p[1:], true
	case len(p) > len(base) && p[len(base)] == '/' && p[:len(base)] == base:
		return p[len(base)+1:], true
	}
	return "", false
}

// Vars are the values of the path variables for one request, each
// directory cleaned and also symlink-resolved (a project reached through a
// symlink is the same project).
type Vars struct {
	Cwd   []string
	Roots []string
	Home  []string
}

// CanonArgs returns args with each run of flags normalised: short clusters
// split (-rf → -r -f) and the run sorted. fixed(i) reports whether args[i]
// may be moved (patterns keep glob tokens in place). args[0] (the program)
// and everything after "--" are kept as they are.
func CanonArgs(args []string, fixed func(int) bool) []string {
	out := make([]string, 0, len(args)+2)
	runStart := -1
	flush := func() {
		if runStart >= 0 {
			slices.Sort(out[runStart:])
			runStart = -1
		}
	}
	for i, a := range args {
		if i == 0 || a == "--" {
			flush()
			out = append(out, a)
			if a == "--" && i > 0 {
				out = append(out, args[i+1:]...)
				return out
			}
			continue
		}
		if !isFlag(a) || (fixed != nil && !fixed(i)) {
			flush()
			out = append(out, a)
			continue
		}
		if runStart < 0 {
			runStart = len(out)
		}
		if isShortCluster(a) {
			for _, c := range a[1:] {
				out = append(out, "-"+string(c))
			}
		} else {
			out = append(out, a)
		}
	}
	flush()
	return out
}

func isFlag(a string) bool { return len(a) > 1 && a[0] == '-' && a != "--" }

// isShortCluster reports whether a is -abc: two or more letters.
func isShortCluster(a string) bool {
	if len(a) < 3 || a[0] != '-' || a[1] == '-' {
		return false
	}
	for i := 1; i < len(a); i++ {
		c := a[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// FlagsOf returns the flags of an argv (after argv[0], up to "--"): short
// clusters split into their letters (-rf → -r -f; -n5 → -n), long flags
// without their =value.
func FlagsOf(args []string) []string {
	var flags []string
	for _, a := range args {
		if a == "--" {
			break
		}
		if !isFlag(a) {
			continue
		}
		if a[1] == '-' {
			name, _, _ := strings.Cut(a, "=")
			flags = append(flags, name)
			continue
		}
		for i := 1; i < len(a); i++ {
			c := a[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i == 1) {
				break
			}
			flags = append(flags, "-"+string(c))
		}
	}
	return flags
}

var idnaProfile = idna.New(idna.MapForLookup(), idna.StrictDomainName(false), idna.Transitional(false))

// NormDomain returns the IDNA (UTS #46, non-transitional) ASCII form of a
// host in lower case, and whether it is a valid host name or IP address.
// An invalid one comes back lower-cased as written.
func NormDomain(h string) (string, bool) {
	h = strings.TrimSuffix(h, ".")
	if addr, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return addr.String(), true
	}
	a, err := idnaProfile.ToASCII(h)
	if err != nil || a == "" {
		return strings.ToLower(h), false
	}
	a = strings.ToLower(a)
	for label := range strings.SplitSeq(a, ".") {
		if label == "" {
			return a, false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return a, false
			}
		}
	}
	return a, true
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Canon is the item's argv with its flag runs normalised (CanonArgs), and
// SubCanon that of the argv after its subcommand's own options: a command
// pattern naming the subcommand matches either.
func (it *Item) Canon() []string    { return it.canon }
func (it *Item) SubCanon() []string { return it.subCanon }

// KindSet is the set of the item's kinds (Kinds lists them).
func (it *Item) KindSet() KindSet { return it.kinds }

// Shape tells, for a path read by shape from the arguments of a program
// without a spec, the index+1 of its command item and that item's key
// (ShapeKey); 0 for any other item.
func (it *Item) Shape() (of int32, key string) { return it.shapeOf, it.shapeKey }

// ShapeKey identifies a command item for the paths read by shape from it.
func ShapeKey(it *Item) string { return shapeKey(it) }

// Vars are the path variables of the request: ${cwd}, ${roots}, ${home}.
func (e *Evidence) Vars() *Vars { return &e.vars }

// SetKinds gives the item the kinds ks, whose set is set (the core
// re-decides a path as a read, or an entry below a directory with the
// kinds of the directory's item).
func (it *Item) SetKinds(ks []Kind, set KindSet) { it.Kinds, it.kinds = ks, set }

// SetCanon sets the item's normal form (a command item made by hand, as
// the core's pattern fuzzer makes one).
func (it *Item) SetCanon(c []string) { it.canon = c }
