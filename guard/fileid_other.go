//go:build !unix

package guard

import (
	"io/fs"

	"github.com/acp-router/acp-router/policy"
)

// fileID: no identity outside unix (hard links are not checked).
func fileID(fs.FileInfo) (policy.FileID, bool) { return policy.FileID{}, false }
