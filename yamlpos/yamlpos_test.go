package yamlpos

import (
	"strings"
	"testing"
)

// TestDocumentIndentation: a YAML indentation mistake is reported at the
// line that has it, not at the start of the block around it, where
// yaml.v3 puts its parser errors (issue 28, point 5).
func TestDocumentIndentation(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       string // FILE:LINE:COL
		msg        string
	}{
		{"key under-indented in a list item", "version: 1\nagents:\n  - name: a\n    command: x\n   args: [y]\nrouting:\n  default: a\n",
			"f.yaml:5:4", "did not find expected '-' indicator"},
		{"key out of its list item", "version: 1\nagents:\n  - name: a\n    command: x\n  args: [y]\n",
			"f.yaml:5:3", "did not find expected '-' indicator"},
		{"key under-indented in a nested mapping", "version: 1\nagents:\n  - name: a\n    command: x\n    env:\n      A: b\n     B: c\nrouting:\n  default: a\n",
			"f.yaml:7:6", "did not find expected key"},
		{"key under-indented at the top", "version: 1\nrouting:\n  default: a\n rules: []\n",
			"f.yaml:4:2", "did not find expected key"},
		// A scanner error already has its line.
		{"over-indented value", "version: 1\nagents:\n  - name: a\n    command: x\n     args: [y]\n",
			"f.yaml:5:1", "mapping values are not allowed in this context"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Document("f.yaml", []byte(c.yaml), "config file")
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.HasPrefix(err.Error(), c.want+": "+c.msg) {
				t.Errorf("error %q, want %s: %s...", err, c.want, c.msg)
			}
		})
	}
}
