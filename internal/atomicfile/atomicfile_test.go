package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestWriteReplaces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	for _, o := range []Options{{}, {Sync: true}, {Sync: true, SyncDir: true}, {Perm: 0o644}} {
		want := []byte("content " + string(rune('a'+o.Perm%26)))
		if err := o.Write(path, want); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != string(want) {
			t.Fatalf("%+v: read %q, %v; want %q", o, got, err, want)
		}
		perm := o.Perm
		if perm == 0 {
			perm = 0o600
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != perm {
			t.Errorf("%+v: mode %v, want %v", o, fi.Mode().Perm(), perm)
		}
	}
	if left := leftovers(t, filepath.Dir(path)); len(left) != 1 {
		t.Errorf("files left: %v, want the one written", left)
	}
}

// A umask that would take the owner's write bit still gives 0600 (the
// tokens file was written so before this package).
func TestWriteModeWhateverUmask(t *testing.T) {
	old := syscall.Umask(0o277)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "tokens.json")
	if err := Write(path, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v under umask 0277, want 0600", fi.Mode().Perm())
	}
}

// A step that fails leaves the old content and no temporary file, and the
// steps come in order, sync only when asked.
func TestWriteFailpoints(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "meta.json")
	if err := Write(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	for _, tc := range []struct {
		o     Options
		steps []string
	}{{Options{}, []string{"write", "rename"}}, {Options{Sync: true}, []string{"write", "sync", "rename"}}} {
		for _, failAt := range tc.steps {
			var seen []string
			o := tc.o
			o.Failpoint = func(step string) error {
				seen = append(seen, step)
				if step == failAt {
					return boom
				}
				return nil
			}
			if err := o.Write(path, []byte("new")); !errors.Is(err, boom) {
				t.Fatalf("fail at %s: %v", failAt, err)
			}
			if got, _ := os.ReadFile(path); string(got) != "old" {
				t.Errorf("fail at %s: content %q, want the old", failAt, got)
			}
			if left := leftovers(t, dir); len(left) != 1 {
				t.Errorf("fail at %s: files left %v", failAt, left)
			}
			if want := tc.steps[:slices.Index(tc.steps, failAt)+1]; !slices.Equal(seen, want) {
				t.Errorf("steps %v, want %v", seen, want)
			}
		}
	}
}

// Readers racing a writer see one whole version or the other.
func TestWriteNeverHalf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	a, b := make([]byte, 1<<16), make([]byte, 1<<16)
	for i := range a {
		a[i], b[i] = 'a', 'b'
	}
	if err := Write(path, a); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := Write(path, [][]byte{a, b}[i%2]); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 500 {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(a) || (string(got) != string(a) && string(got) != string(b)) {
			t.Fatalf("read %d bytes, not one whole version", len(got))
		}
	}
	close(stop)
	wg.Wait()
}

func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// A lock held by another open file times out at the deadline; released,
// it is taken (flock belongs to the open file, not the process).
func TestLockBy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	open := func() *os.File {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := open(), open()
	defer b.Close()
	if err := LockBy(a, time.Now()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := LockBy(b, start.Add(50*time.Millisecond)); !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("held elsewhere: %v, want ErrLockTimeout", err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("gave up after %v, before the deadline", waited)
	}
	go func() { time.Sleep(30 * time.Millisecond); a.Close() }()
	if err := LockBy(b, time.Now().Add(5*time.Second)); err != nil {
		t.Fatalf("released by the other open: %v", err)
	}
}

// OpenLocked creates the lock file 0600, never follows a symlink planted
// at its name, and excludes a second OpenLocked until the first is closed.
func TestOpenLocked(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.lock")
	a, err := OpenLocked(path, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
	if _, err := OpenLocked(path, time.Now().Add(20*time.Millisecond)); !errors.Is(err, ErrLockTimeout) {
		t.Errorf("held: %v, want ErrLockTimeout", err)
	}
	a.Close()
	b, err := OpenLocked(path, time.Now())
	if err != nil {
		t.Fatalf("released: %v", err)
	}
	b.Close()
	link := filepath.Join(dir, "link.lock")
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), link); err != nil {
		t.Fatal(err)
	}
	if f, err := OpenLocked(link, time.Now()); err == nil {
		f.Close()
		t.Error("a symlink at the lock's name was followed")
	}
	if _, err := os.Lstat(filepath.Join(dir, "elsewhere")); err == nil {
		t.Error("the symlink's target was created")
	}
}
