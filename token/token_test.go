package token

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func openStore(t *testing.T, stateDir string, o Options) *Store {
	t.Helper()
	s, err := Open(stateDir, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// request is a request from addr carrying secret the way how says
// ("bearer", "cookie", "query", "" for none).
func request(how, secret, addr string) *http.Request {
	target := "/acp"
	if how == "query" {
		target += "?" + QueryParam + "=" + secret
	}
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr = addr
	switch how {
	case "bearer":
		r.Header.Set("Authorization", "Bearer "+secret)
	case "cookie":
		r.AddCookie(&http.Cookie{Name: CookieName, Value: secret})
	}
	return r
}

// TestCreateListRevoke pins the life of a token: its secret's shape, what
// List shows, refused names, roles and duplicates, and revoke.
func TestCreateListRevoke(t *testing.T) {
	t.Parallel()
	clock := newClock()
	s := openStore(t, t.TempDir(), Options{Now: clock.Now})
	secret, err := s.Create("phone", RoleObserver, false)
	if err != nil {
		t.Fatal(err)
	}
	raw, ok := strings.CutPrefix(secret, Prefix)
	if b, err := base64.RawURLEncoding.DecodeString(raw); !ok || err != nil || len(b) != 32 {
		t.Errorf("secret %q: want %s + base64url of 32 bytes", secret, Prefix)
	}
	other, err := s.Create("lead@laptop", RoleController, true)
	if err != nil || other == secret {
		t.Fatalf("second create: %v (same secret: %v)", err, other == secret)
	}
	if _, err := s.Create("phone", RoleController, true); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate name: %v, want ErrExists", err)
	}
	for _, name := range []string{"", "a b", "tab\tname", "new\nline", "nul\x00", "é", "-flag", "editor", "Editor", strings.Repeat("x", MaxNameLen+1)} {
		if _, err := s.Create(name, RoleController, true); !errors.Is(err, ErrBadName) {
			t.Errorf("create %q: %v, want ErrBadName", name, err)
		}
	}
	if _, err := s.Create(strings.Repeat("x", MaxNameLen), RoleController, true); err != nil {
		t.Errorf("a name of MaxNameLen bytes: %v", err)
	}
	if _, err := s.Create("root", "admin", true); !errors.Is(err, ErrBadRole) {
		t.Errorf("role admin: %v, want ErrBadRole", err)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	want := []Info{
		{Name: "phone", Role: RoleObserver, AllSessions: false, Created: clock.Now()},
		{Name: "lead@laptop", Role: RoleController, AllSessions: true, Created: clock.Now()},
		{Name: strings.Repeat("x", MaxNameLen), Role: RoleController, AllSessions: true, Created: clock.Now()},
	}
	if !reflect.DeepEqual(list, want) {
		t.Errorf("List:\n got %+v\nwant %+v", list, want)
	}
	if err := s.Revoke("phone"); err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke("phone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("revoke twice: %v, want ErrNotFound", err)
	}
	if _, err := s.Authenticate(request("bearer", secret, "192.0.2.1:5000")); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("revoked token authenticated: %v", err)
	}
	if id, err := s.Authenticate(request("bearer", other, "192.0.2.2:5000")); err != nil || id.ID == "" || id != (Identity{Name: "lead@laptop", Role: RoleController, AllSessions: true, ID: id.ID}) {
		t.Errorf("remaining token: %+v, %v", id, err)
	}
}

// TestFileModes pins the file 0600 and the directory 0700 with a umask of
// 0, a directory made looser beforehand tightened, and no temp file left.
// Not parallel: the umask belongs to the process.
func TestFileModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	state := t.TempDir()
	if err := os.MkdirAll(Dir(state), 0o777); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, state, Options{})
	for i := range 3 {
		if _, err := s.Create(fmt.Sprint("t", i), RoleController, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Revoke("t1"); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{Dir(state): 0o700 | os.ModeDir, s.Path(): 0o600, filepath.Join(Dir(state), "tokens.lock"): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
		}
	}
	entries, _ := os.ReadDir(Dir(state))
	if len(entries) != 2 {
		t.Errorf("tokens dir holds %v, want tokens.json and tokens.lock only", entries)
	}
}

// TestInsecureFileRefused pins failing closed: a tokens file others may
// read or write, a symbolic link, or a format this router does not know
// accepts no token, and List says why.
func TestInsecureFileRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		spoil func(t *testing.T, path string)
		want  error
	}{
		{"group readable", func(t *testing.T, p string) { os.Chmod(p, 0o640) }, ErrInsecure},
		{"world writable", func(t *testing.T, p string) { os.Chmod(p, 0o602) }, ErrInsecure},
		{"symlink", func(t *testing.T, p string) {
			moved := p + ".real"
			os.Rename(p, moved)
			if err := os.Symlink(moved, p); err != nil {
				t.Fatal(err)
			}
		}, ErrInsecure},
		{"version 2", func(t *testing.T, p string) {
			b, _ := os.ReadFile(p)
			os.WriteFile(p, bytes.Replace(b, []byte(`"version": 1`), []byte(`"version": 2`), 1), 0o600)
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			s := openStore(t, t.TempDir(), Options{Logger: hclog.New(&hclog.LoggerOptions{Output: &logs})})
			secret, err := s.Create("a", RoleController, true)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Authenticate(request("bearer", secret, "127.0.0.1:1")); err != nil {
				t.Fatal(err)
			}
			c.spoil(t, s.Path())
			for range 3 {
				_, err = s.Authenticate(request("bearer", secret, "127.0.0.1:1"))
				if !errors.Is(err, ErrUnauthorized) || c.want != nil && !errors.Is(err, c.want) {
					t.Errorf("Authenticate: %v, want ErrUnauthorized (%v)", err, c.want)
				}
			}
			if n := strings.Count(logs.String(), "every token refused"); n != 1 {
				t.Errorf("the unreadable file logged %d times for 3 requests, want once:\n%s", n, logs.String())
			}
			if _, err := s.List(); err == nil || c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("List: %v, want %v", err, c.want)
			}
		})
	}
}

// TestSecretNotOnDisk pins that the file holds the secret's SHA-256, not
// the secret, nor its random part.
func TestSecretNotOnDisk(t *testing.T) {
	t.Parallel()
	s := openStore(t, t.TempDir(), Options{})
	secret, err := s.Create("ci", RoleController, true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	raw := strings.TrimPrefix(secret, Prefix)
	if bytes.Contains(b, []byte(raw)) || bytes.Contains(b, []byte(raw[:16])) {
		t.Errorf("the tokens file holds the secret:\n%s", b)
	}
	sum := sha256.Sum256([]byte(secret))
	if !bytes.Contains(b, []byte(hex.EncodeToString(sum[:]))) {
		t.Errorf("the tokens file lacks the secret's SHA-256:\n%s", b)
	}
}

// TestAuthenticateSources pins where a token is read from, the Identity it
// gives, and that a request without one is refused without being counted
// as a failure.
func TestAuthenticateSources(t *testing.T) {
	t.Parallel()
	s := openStore(t, t.TempDir(), Options{})
	secret, err := s.Create("phone", RoleObserver, false)
	if err != nil {
		t.Fatal(err)
	}
	want := Identity{Name: "phone", Role: RoleObserver, AllSessions: false}
	for _, how := range []string{"bearer", "cookie", "query"} {
		id, err := s.Authenticate(request(how, secret, "127.0.0.1:40000"))
		if want.ID == "" {
			want.ID = id.ID // the same token, the same ID, however it came
		}
		if err != nil || id.ID == "" || id != want {
			t.Errorf("%s: %+v, %v; want %+v", how, id, err, want)
		}
	}
	r := request("", "", "127.0.0.1:40000")
	r.Header.Set("Authorization", "bearer  "+secret+" ")
	if id, err := s.Authenticate(r); err != nil || id != want {
		t.Errorf("lower-case scheme, spaces: %+v, %v", id, err)
	}
	for i := range 20 {
		if _, err := s.Authenticate(request("", "", "198.51.100.7:1")); !errors.Is(err, ErrNoCredentials) {
			t.Fatalf("no token, attempt %d: %v, want ErrNoCredentials", i, err)
		}
	}
	r = request("", "", "198.51.100.7:1")
	r.Header.Set("Authorization", "Basic "+secret)
	if _, err := s.Authenticate(r); !errors.Is(err, ErrNoCredentials) {
		t.Errorf("Basic auth: %v, want ErrNoCredentials", err)
	}
	if id, err := s.Authenticate(request("bearer", secret, "198.51.100.7:1")); err != nil || id != want {
		t.Errorf("after requests without a token the address is held back: %v", err)
	}
	for _, bad := range []string{secret + "x", secret[:len(secret)-1], strings.Repeat("a", 10000)} {
		if _, err := s.Authenticate(request("bearer", bad, fmt.Sprintf("203.0.113.%d:1", len(bad)%200))); !errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrNoCredentials) {
			t.Errorf("wrong token: %v", err)
		}
	}
}

// TestConstantTimeCompare pins that digests are compared with
// subtle.ConstantTimeCompare, and against every token whichever matches.
func TestConstantTimeCompare(t *testing.T) {
	if reflect.ValueOf(compareDigest).Pointer() != reflect.ValueOf(subtle.ConstantTimeCompare).Pointer() {
		t.Fatal("digests are not compared with subtle.ConstantTimeCompare")
	}
	s := openStore(t, t.TempDir(), Options{})
	var secrets []string
	for i := range 5 {
		secret, err := s.Create(fmt.Sprint("t", i), RoleController, true)
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, secret)
	}
	var calls int
	compareDigest = func(a, b []byte) int { calls++; return subtle.ConstantTimeCompare(a, b) }
	defer func() { compareDigest = subtle.ConstantTimeCompare }()
	for _, secret := range []string{secrets[0], secrets[4], "acpr_wrong"} {
		calls = 0
		s.Authenticate(request("bearer", secret, "127.0.0.1:1"))
		if calls != 5 {
			t.Errorf("%d comparisons for one attempt, want one per token (5)", calls)
		}
	}
}

// TestRevokeInRunningStore pins that a token revoked by another Store (the
// CLI) is refused by a running one at once, and a token created elsewhere
// accepted at once.
func TestRevokeInRunningStore(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	running := openStore(t, state, Options{})
	cli := openStore(t, state, Options{})
	secret, err := cli.Create("phone", RoleController, true)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := running.Authenticate(request("cookie", secret, "127.0.0.1:1")); err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	if err := cli.Revoke("phone"); err != nil {
		t.Fatal(err)
	}
	if _, err := running.Authenticate(request("cookie", secret, "127.0.0.1:1")); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("revoked token still accepted by a running Store: %v", err)
	}
	again, err := cli.Create("phone", RoleObserver, true)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := running.Authenticate(request("cookie", again, "127.0.0.2:1")); err != nil || id.Role != RoleObserver {
		t.Errorf("token created by the CLI: %+v, %v", id, err)
	}
}

// TestRereadWithSameStamp pins the fallback when the stat says nothing
// changed (a rewrite in the same timestamp tick, same size, an inode
// reused): the cache is read again once it is rereadEvery old, not
// before. In a synctest bubble: the second passes on the bubble's clock.
func TestRereadWithSameStamp(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := openStore(t, t.TempDir(), Options{})
		secret, err := s.Create("a", RoleController, true)
		if err != nil {
			t.Fatal(err)
		}
		// Twice: the first use writes the last-used time, a change of the
		// file this Store reads again.
		for range 2 {
			if _, err := s.Authenticate(request("bearer", secret, "127.0.0.1:1")); err != nil {
				t.Fatal(err)
			}
		}
		// Pretend the file was revoked while its stamp stayed the same: the
		// cache is what a stale reader would keep.
		s.mu.Lock()
		s.cache = nil
		s.mu.Unlock()
		if _, err := s.Authenticate(request("bearer", secret, "127.0.0.1:1")); err == nil {
			t.Fatal("the cache was not used while fresh (the test proves nothing)")
		}
		// A new address each time: failures hold an address back.
		time.Sleep(rereadEvery - time.Millisecond)
		if _, err := s.Authenticate(request("bearer", secret, "127.0.0.2:1")); err == nil {
			t.Fatalf("the file was read again before the cache was %v old", rereadEvery)
		}
		time.Sleep(time.Millisecond)
		if _, err := s.Authenticate(request("bearer", secret, "127.0.0.3:1")); err != nil {
			t.Fatalf("the file was not read again once the cache was %v old: %v", rereadEvery, err)
		}
	})
}

// TestConcurrentCreate pins that creates from two Stores (two open lock
// files, as two processes have) and from another process lose nothing.
func TestConcurrentCreate(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperCreate$")
	helper.Env = append(os.Environ(), "TOKEN_TEST_STATE="+state)
	var helperOut bytes.Buffer
	helper.Stdout, helper.Stderr = &helperOut, &helperOut
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	stores := []*Store{openStore(t, state, Options{}), openStore(t, state, Options{})}
	var wg sync.WaitGroup
	const each = 15
	for si, s := range stores {
		for g := range 2 {
			wg.Go(func() {
				for i := range each {
					if _, err := s.Create(fmt.Sprintf("s%d-g%d-%d", si, g, i), RoleController, true); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
	wg.Wait()
	if err := helper.Wait(); err != nil {
		t.Fatalf("helper process: %v\n%s", err, helperOut.String())
	}
	list, err := stores[0].List()
	if err != nil {
		t.Fatal(err)
	}
	if want := 4*each + helperCreates; len(list) != want {
		t.Errorf("%d tokens after concurrent creates, want %d", len(list), want)
	}
	if !strings.Contains(helperOut.String(), "PASS") {
		t.Errorf("helper process did not run its creates:\n%s", helperOut.String())
	}
}

const helperCreates = 30

// TestHelperCreate is TestConcurrentCreate's other process.
func TestHelperCreate(t *testing.T) {
	state := os.Getenv("TOKEN_TEST_STATE")
	if state == "" {
		t.Skip("the other process of TestConcurrentCreate")
	}
	s := openStore(t, state, Options{})
	for i := range helperCreates {
		if _, err := s.Create(fmt.Sprint("proc-", i), RoleObserver, true); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEnsureFirst pins the first-use token: created once when the store is
// empty, by one of several routers starting at once, never again.
func TestEnsureFirst(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	var mu sync.Mutex
	var made []string
	var wg sync.WaitGroup
	for range 4 {
		s := openStore(t, state, Options{})
		wg.Go(func() {
			secret, created, err := s.EnsureFirst("local")
			if err != nil {
				t.Error(err)
			}
			if created {
				mu.Lock()
				made = append(made, secret)
				mu.Unlock()
			} else if secret != "" {
				t.Error("a secret returned without creating")
			}
		})
	}
	wg.Wait()
	if len(made) != 1 {
		t.Fatalf("%d first tokens made, want 1", len(made))
	}
	s := openStore(t, state, Options{})
	if id, err := s.Authenticate(request("query", made[0], "127.0.0.1:9")); err != nil || id.ID == "" || id != (Identity{Name: "local", Role: RoleController, AllSessions: true, ID: id.ID}) {
		t.Errorf("first token: %+v, %v", id, err)
	}
	if err := s.Revoke("local"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("ci", RoleObserver, true); err != nil {
		t.Fatal(err)
	}
	if _, created, err := s.EnsureFirst("local"); created || err != nil {
		t.Errorf("EnsureFirst with a token in the store: created %v, %v", created, err)
	}
	if _, _, err := s.EnsureFirst("bad name"); !errors.Is(err, ErrBadName) {
		t.Errorf("EnsureFirst with a bad name: %v", err)
	}
}

// TestFailuresHeldBack pins the slowing of failures on a fake clock: each
// wrong token from an address holds it back twice as long (bounded), during
// which even the right token fails unread; other addresses are not
// affected; a success or a quiet Forget period starts again from zero.
func TestFailuresHeldBack(t *testing.T) {
	t.Parallel()
	clock := newClock()
	o := Options{Now: clock.Now, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, Forget: time.Minute}
	s := openStore(t, t.TempDir(), o)
	secret, err := s.Create("phone", RoleController, true)
	if err != nil {
		t.Fatal(err)
	}
	const attacker, other = "203.0.113.5:4444", "198.51.100.1:1"
	wantDelays := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, d := range wantDelays {
		d *= time.Millisecond
		if _, err := s.Authenticate(request("bearer", "acpr_guess", attacker)); !errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrHeldBack) {
			t.Fatalf("failure %d: %v, want a checked failure", i+1, err)
		}
		clock.Advance(d - time.Millisecond)
		if _, err := s.Authenticate(request("bearer", secret, "203.0.113.5:5555")); !errors.Is(err, ErrHeldBack) {
			t.Fatalf("after failure %d, %v later: %v, want ErrHeldBack (held back %v)", i+1, d-time.Millisecond, err, d)
		}
		if _, err := s.Authenticate(request("bearer", secret, other)); err != nil {
			t.Fatalf("another address is held back too: %v", err)
		}
		clock.Advance(time.Millisecond)
	}
	// Held-back attempts do not extend the delay; the right token now
	// passes and clears the address.
	if _, err := s.Authenticate(request("bearer", secret, attacker)); err != nil {
		t.Fatalf("after the delay: %v", err)
	}
	if _, err := s.Authenticate(request("bearer", "acpr_guess", attacker)); err != nil && errors.Is(err, ErrHeldBack) {
		t.Fatal("a success did not clear the address")
	}
	clock.Advance(99 * time.Millisecond)
	if _, err := s.Authenticate(request("bearer", secret, attacker)); !errors.Is(err, ErrHeldBack) {
		t.Errorf("after a success and one failure: %v, want the first delay again", err)
	}
	// An IPv6 /64 is one source.
	s.Authenticate(request("bearer", "acpr_guess", "[2001:db8:1:2::1]:1"))
	if _, err := s.Authenticate(request("bearer", secret, "[2001:db8:1:2::ffff]:1")); !errors.Is(err, ErrHeldBack) {
		t.Errorf("another address of the same /64: %v, want ErrHeldBack", err)
	}
	// Forgotten after a quiet Forget period: the first delay again.
	for range 5 {
		clock.Advance(time.Second)
		s.Authenticate(request("bearer", "acpr_guess", attacker))
	}
	clock.Advance(time.Minute)
	s.Authenticate(request("bearer", "acpr_guess", attacker))
	clock.Advance(100 * time.Millisecond)
	if _, err := s.Authenticate(request("bearer", secret, attacker)); err != nil {
		t.Errorf("after a quiet minute the delay did not start again from the first: %v", err)
	}
}

// TestFailuresMemoryBounded pins that failures from ever new addresses
// never make the limiter remember more than MaxTracked of them.
func TestFailuresMemoryBounded(t *testing.T) {
	t.Parallel()
	clock := newClock()
	s := openStore(t, t.TempDir(), Options{Now: clock.Now, MaxTracked: 100})
	if _, err := s.Create("a", RoleController, true); err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		s.Authenticate(request("bearer", "acpr_guess", fmt.Sprintf("10.%d.%d.%d:1", i>>16, i>>8&255, i&255)))
		if n := s.lim.tracked(); n > 100 {
			t.Fatalf("after %d addresses %d are remembered, want at most 100", i+1, n)
		}
	}
	if s.lim.lru.Len() != s.lim.tracked() {
		t.Errorf("the LRU list (%d) and the map (%d) disagree", s.lim.lru.Len(), s.lim.tracked())
	}
	// The most recent failures are the ones kept.
	if s.lim.allow("10.0.19.135") {
		t.Error("the last failing address was forgotten")
	}
}

// TestLastUsed pins the coarse last-used time: written on the first use,
// not rewritten within LastUsedEvery (the file untouched), then updated.
func TestLastUsed(t *testing.T) {
	t.Parallel()
	clock := newClock()
	s := openStore(t, t.TempDir(), Options{Now: clock.Now, LastUsedEvery: time.Minute})
	secret, err := s.Create("a", RoleController, true)
	if err != nil {
		t.Fatal(err)
	}
	lastUsed := func() time.Time {
		l, err := s.List()
		if err != nil {
			t.Fatal(err)
		}
		return l[0].LastUsed
	}
	if !lastUsed().IsZero() {
		t.Fatal("a new token has a last-used time")
	}
	auth := func() {
		t.Helper()
		if _, err := s.Authenticate(request("bearer", secret, "127.0.0.1:1")); err != nil {
			t.Fatal(err)
		}
	}
	auth()
	first := clock.Now()
	if got := lastUsed(); !got.Equal(first) {
		t.Errorf("last used %v, want %v", got, first)
	}
	before, _ := os.Stat(s.Path())
	for range 10 {
		clock.Advance(5 * time.Second)
		auth()
	}
	after, _ := os.Stat(s.Path())
	if !os.SameFile(before, after) || !lastUsed().Equal(first) {
		t.Error("the file was rewritten within LastUsedEvery")
	}
	clock.Advance(15 * time.Second)
	auth()
	if got := lastUsed(); !got.Equal(clock.Now()) {
		t.Errorf("after LastUsedEvery: last used %v, want %v", got, clock.Now())
	}
}

// TestNoSecretInLogs pins that nothing the Store logs or returns as an
// error holds a secret, the one tried or the ones stored.
func TestNoSecretInLogs(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace})
	state := t.TempDir()
	s := openStore(t, state, Options{Logger: log, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond})
	first, _, err := s.EnsureFirst("local")
	if err != nil {
		t.Fatal(err)
	}
	secret, err := s.Create("phone", RoleController, true)
	if err != nil {
		t.Fatal(err)
	}
	wrong := Prefix + "Zm9yZ2VkLXRva2VuLXRoYXQtaXMtbm90LWEtcmVhbC1vbmU"
	var errs []error
	for _, how := range []string{"bearer", "cookie", "query"} {
		for range warnAfter + 1 {
			_, err := s.Authenticate(request(how, wrong, "192.0.2.9:1"))
			errs = append(errs, err)
			time.Sleep(2 * time.Millisecond)
		}
		_, err := s.Authenticate(request(how, secret, "192.0.2.10:1"))
		errs = append(errs, err)
	}
	_, err = s.Create("phone", RoleController, true)
	errs = append(errs, err, s.Revoke("phone"))
	os.Chmod(s.Path(), 0o644)
	_, err = s.Authenticate(request("bearer", first, "192.0.2.11:1"))
	errs = append(errs, err)
	for _, e := range errs {
		if e != nil {
			fmt.Fprintln(&logs, e)
		}
	}
	if !strings.Contains(logs.String(), "repeated authentication failures") || !strings.Contains(logs.String(), "token=phone") {
		t.Fatalf("the test logged less than it should (nothing proven):\n%s", logs.String())
	}
	for _, sec := range []string{first, secret, wrong} {
		if strings.Contains(logs.String(), strings.TrimPrefix(sec, Prefix)[:12]) {
			t.Errorf("a secret is in the logs or errors:\n%s", logs.String())
		}
	}
}

func TestSourceKey(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"192.0.2.1:443":               "192.0.2.1",
		"[::ffff:192.0.2.1]:443":      "192.0.2.1",
		"[2001:db8::1]:1":             "2001:db8::/64",
		"[fe80::1%eth0]:1":            "fe80::/64",
		"[::1]:8080":                  "::/64",
		"@":                           "@",
		"":                            "",
		strings.Repeat("h", 100) + "": strings.Repeat("h", 64),
	} {
		if got := sourceKey(in); got != want {
			t.Errorf("sourceKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkAuthenticate is the cost remote/ pays on every request: a stat
// of the file, one SHA-256, a compare per token (10 here).
func BenchmarkAuthenticate(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	var secret string
	for i := range 10 {
		if secret, err = s.Create(fmt.Sprint("t", i), RoleController, true); err != nil {
			b.Fatal(err)
		}
	}
	r := request("bearer", secret, "127.0.0.1:1")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Authenticate(r); err != nil {
			b.Fatal(err)
		}
	}
}

// watchCounter records which of a test's watches fired, and when.
type watchCounter struct {
	mu    sync.Mutex
	fired map[string]time.Time
}

func (w *watchCounter) watch(s *Store, name, id string) (stop func()) {
	return s.Watch(id, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, dup := w.fired[name]; dup {
			panic("gone called twice for " + name)
		}
		w.fired[name] = time.Now()
	})
}

func (w *watchCounter) has(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.fired[name]
	return ok
}

// waitWatch waits up to 2 s for name's watch to fire.
func (w *watchCounter) wait(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !w.has(name) {
		if time.Now().After(deadline) {
			t.Fatalf("%s's watch did not fire within 2 s", name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pollGoroutines counts the Store's file watchers running.
func pollGoroutines() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "token.(*Store).poll(")
}

// TestWatchRevoke: a live connection learns that its token is gone (issue
// 30's revoke must end the connections a token opened, not only refuse its
// next request): a revoke by another process's Store fires the token's
// watches within the poll, not another token's; a token revoked and created
// again under the same name is another token (its old connections end,
// new ones are watched under the new ID); a watch of a token already gone
// fires at once; stop ends a watch; with no watch left no goroutine runs.
func TestWatchRevoke(t *testing.T) {
	state := t.TempDir()
	running := openStore(t, state, Options{})
	cli := openStore(t, state, Options{})
	auth := func(secret string) Identity {
		t.Helper()
		id, err := running.Authenticate(request("bearer", secret, "127.0.0.1:1"))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	alice, _ := cli.Create("alice", RoleController, true)
	bob, _ := cli.Create("bob", RoleController, true)
	a1, b := auth(alice), auth(bob)
	w := &watchCounter{fired: map[string]time.Time{}}
	w.watch(running, "alice-ws", a1.ID)
	w.watch(running, "alice-sse", a1.ID)
	stopBob := w.watch(running, "bob", b.ID)
	stopped := w.watch(running, "stopped", a1.ID)
	stopped()
	stopped()

	revoked := time.Now()
	if err := cli.Revoke("alice"); err != nil {
		t.Fatal(err)
	}
	w.wait(t, "alice-ws")
	w.wait(t, "alice-sse")
	if d := w.fired["alice-ws"].Sub(revoked); d > time.Second {
		t.Errorf("the watch fired %v after the revoke, want at most 1 s", d)
	}
	time.Sleep(2 * watchEvery)
	if w.has("bob") || w.has("stopped") {
		t.Errorf("fired: %v; want alice's two only", w.fired)
	}

	// Revoked and created again: the old ID is gone, the new one lives.
	alice2, _ := cli.Create("alice", RoleController, true)
	a2 := auth(alice2)
	if a2.ID == a1.ID || a2.ID == "" {
		t.Fatalf("a re-created token has the ID %q of the revoked one (%q)", a2.ID, a1.ID)
	}
	w.watch(running, "old-alice-late", a1.ID) // a request authenticated just before the revoke
	if !w.has("old-alice-late") {
		t.Error("a watch of a revoked token did not fire at once")
	}
	w.watch(running, "alice2", a2.ID)
	w.watch(running, "alice2-old", a2.ID)
	if err := cli.Revoke("alice"); err != nil {
		t.Fatal(err)
	}
	alice3, _ := cli.Create("alice", RoleController, true) // at once: one sweep may see only the end state
	w.wait(t, "alice2")
	w.wait(t, "alice2-old")
	a3 := auth(alice3)
	w.watch(running, "alice3", a3.ID)
	time.Sleep(2 * watchEvery)
	if w.has("alice3") || w.has("bob") {
		t.Errorf("fired: %v; the new alice and bob must live", w.fired)
	}

	// The file gone or not ours any more: every token refused, every
	// connection ended (fail closed).
	if err := os.Chmod(running.Path(), 0o644); err != nil {
		t.Fatal(err)
	}
	w.wait(t, "bob")
	w.wait(t, "alice3")
	stopBob()
	deadline := time.Now().Add(2 * time.Second)
	for pollGoroutines() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := pollGoroutines(); n > 0 {
		t.Errorf("%d poll goroutines left with no watch", n)
	}
}
