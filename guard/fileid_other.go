//go:build !unix

package guard

import (
	"io/fs"

	"github.com/acp-router/acp-router/policy"
	"github.com/acp-router/acp-router/policy/extract"
)

// fileID: no identity outside unix (hard links are not checked).
func fileID(fs.FileInfo) (extract.FileID, bool) { return extract.FileID{}, false }
