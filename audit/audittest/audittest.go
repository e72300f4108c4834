// Package audittest holds what the tests of the audit log and of its users
// share: reading a log back, a lock held by "another router". Only _test.go
// files import it.
package audittest

import (
	"bufio"
	"encoding/json"
	"os"
	"sync"
	"syscall"
	"testing"
)

// HoldLock takes the lock of the audit log at path (FILE.lock, see package
// audit) through a descriptor of its own, as a sibling router stopped with
// ^Z while writing holds it, until the returned func is called or the test
// ends.
func HoldLock(t testing.TB, path string) (release func()) {
	t.Helper()
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { f.Close() }) }
	t.Cleanup(release)
	return release
}

// ReadLines reads one file of the audit log at path, one decoded object a
// line; a line that is not a JSON object fails the test.
func ReadLines(t testing.TB, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("audit log %s: line %q is not a JSON object: %v", path, sc.Text(), err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("audit log %s: %v", path, err)
	}
	return out
}
