//go:build unix

package guard

import (
	"io/fs"
	"syscall"

	"github.com/acp-router/acp-router/policy"
)

// fileID is the identity of the regular file fi describes.
func fileID(fi fs.FileInfo) (policy.FileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return policy.FileID{}, false
	}
	return policy.FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino), Nlink: uint64(st.Nlink)}, true
}
