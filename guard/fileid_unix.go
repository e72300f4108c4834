//go:build unix

package guard

import (
	"io/fs"
	"syscall"

	"github.com/acp-router/acp-router/policy/extract"
)

// fileID is the identity of the regular file fi describes.
func fileID(fi fs.FileInfo) (extract.FileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return extract.FileID{}, false
	}
	return extract.FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino), Nlink: uint64(st.Nlink)}, true
}
