package store

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMain runs the child processes of the multi-process and crash tests
// when the test binary is re-executed with childEnv set.
func TestMain(m *testing.M) {
	switch role := os.Getenv(childEnv); role {
	case "":
		os.Exit(m.Run())
	case "crash":
		os.Exit(crashChild())
	case "writer":
		os.Exit(writerChild())
	case "lister":
		os.Exit(listerChild())
	default:
		fmt.Fprintf(os.Stderr, "unknown child role %q\n", role)
		os.Exit(2)
	}
}

const childEnv = "ACP_ROUTER_STORE_TEST_CHILD"

// openT opens a store that is closed when the test ends.
func openT(t testing.TB, dir string, o Options) *Store {
	t.Helper()
	st, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// update is the content of the lines tests append: which session, turn and
// index it is, padded to a chosen size.
type update struct {
	S   string `json:"s"`
	T   int    `json:"t"`
	I   int    `json:"i"`
	Pad string `json:"pad"`
}

// mkLine returns a session/update-like JSON line of exactly size bytes
// (at least its minimum).
func mkLine(id string, turn, i, size int) []byte {
	b, _ := json.Marshal(update{S: id, T: turn, I: i})
	if pad := size - len(b); pad > 0 {
		b, _ = json.Marshal(update{S: id, T: turn, I: i, Pad: strings.Repeat("x", pad)})
	}
	return b
}

func parseLine(t testing.TB, line []byte) update {
	t.Helper()
	var u update
	if err := json.Unmarshal(line, &u); err != nil {
		t.Fatalf("stored line %q: %v", line, err)
	}
	return u
}

// turn records one turn: TurnStart, n lines of size bytes, TurnEnd.
func turn(t testing.TB, st *Store, id string, tn, n, size int) {
	t.Helper()
	must(t, st.TurnStart(id))
	for i := range n {
		must(t, st.Append(id, mkLine(id, tn, i, size)))
	}
	must(t, st.TurnEnd(id))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func load(t testing.TB, st *Store, id string) *History {
	t.Helper()
	h, err := st.Load(context.Background(), id)
	if err != nil {
		t.Fatalf("Load(%q): %v", id, err)
	}
	return h
}

// pairs turns stored lines into "t.i" strings, for comparing sequences.
func pairs(t testing.TB, lines [][]byte) []string {
	t.Helper()
	out := make([]string, len(lines))
	for k, l := range lines {
		u := parseLine(t, l)
		out[k] = fmt.Sprintf("%d.%d", u.T, u.I)
	}
	return out
}

func seq(turns []int, n int) []string {
	var out []string
	for _, tn := range turns {
		for i := range n {
			out = append(out, fmt.Sprintf("%d.%d", tn, i))
		}
	}
	return out
}

func ids(ms []Meta) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// sweepNow runs the limits at once, on the writer goroutine.
func sweepNow(t testing.TB, st *Store) {
	t.Helper()
	st.mu.Lock()
	st.sweepReq = true
	st.mu.Unlock()
	must(t, st.Sync(context.Background()))
}

// age sets the modification time of a session's files.
func age(t testing.TB, dir, id string, when time.Time) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, fileName(id)+".*")) // .json, .log, .log-NONCE
	for _, p := range paths {
		if err := os.Chtimes(p, when, when); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
}

func listAll(t testing.TB, st *Store, o ListOptions) []string {
	t.Helper()
	p, err := st.List(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	got := ids(p.Sessions)
	slices.Sort(got)
	return got
}
