package extract

import (
	"errors"
	"testing"
)

// TestLinkFS: the links a command line makes are followed as the kernel
// will follow them, .. after them included; a moved or copied link (target
// not known) fails a path through it but not the link itself.
func TestLinkFS(t *testing.T) {
	base := NewMapFS([]string{"/home/user/project/src/", "/home/user/.netrc"},
		map[string]string{"/home/user/project/l": "src"})
	fs := newLinkFS(base, map[string][]string{
		"/home/user/project/a/b/k":  {"/home/user/project/a/b/../.."},
		"/home/user/project/src/up": {"/home/user/project/src/.."},
		"/home/user/project/moved":  {""},
		"/home/user/project/two":    {"/x", "/y"},
	}, []string{"/home/user/project/vendor"})
	if _, ok := fs.(Walker); !ok {
		t.Error("a linkFS over a Walker is not a Walker")
	}
	for _, tc := range []struct {
		in, want string
		err      error
	}{
		{"/home/user/project/a/b/k/../.netrc", "/home/user/.netrc", nil},
		{"/home/user/project/a/b/k", "/home/user/project", nil},
		{"/home/user/project/l/up/../x", "/home/user/x", nil}, // a base link, then a made one
		{"/home/user/project/moved", "/home/user/project/moved", nil},
		{"/home/user/project/moved/.netrc", "", errLinkUnknown},
		{"/home/user/project/two", "", errLinkUnknown},
		{"/home/user/project/src/x.go", "/home/user/project/src/x.go", nil},
		{"/home/user/project/vendor", "/home/user/project/vendor", nil}, // an extracted tree's directory
		{"/home/user/project/vendor/a", "", errLinkUnknown},             // and what is below it
		{"/home/user/project/vendorx", "/home/user/project/vendorx", nil},
	} {
		got, err := fs.Resolve(tc.in)
		if got != tc.want || !errors.Is(err, tc.err) && !(err == nil && tc.err == nil) {
			t.Errorf("Resolve(%s) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}
