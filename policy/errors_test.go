package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acp-router/acp-router/yamlpos"
	"go.yaml.in/yaml/v3"
)

// TestLoadErrors runs testdata/errors/*.yaml: each file starts with one
// "# want: LINE:COL: message" line per expected error, in order. Files
// named user-*.yaml are parsed as the config's permissions: mapping (the
// user layer), the others as org policy files.
func TestLoadErrors(t *testing.T) {
	files, err := filepath.Glob("testdata/errors/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for line := range strings.Lines(string(data)) {
				w, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "# want: ")
				if !ok {
					break
				}
				want = append(want, file+":"+w)
			}
			if len(want) == 0 {
				t.Fatal(`the file does not start with a "# want: " line`)
			}
			if strings.HasPrefix(filepath.Base(file), "user-") {
				var n yaml.Node
				if err := yaml.Unmarshal(data, &n); err != nil {
					t.Fatal(err)
				}
				_, err = ParseLayer(file, &n)
			} else {
				_, err = ParseFile(file, data)
			}
			if err == nil {
				t.Fatal("parse succeeded")
			}
			if got := err.Error(); got != strings.Join(want, "\n") {
				t.Errorf("got errors:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
			}
			errs := []error{err}
			if joined, ok := err.(interface{ Unwrap() []error }); ok {
				errs = joined.Unwrap()
			}
			for _, e := range errs {
				var pe *yamlpos.Error
				if !errors.As(e, &pe) {
					t.Errorf("error %q is a %T, want *yamlpos.Error", e, e)
				}
			}
		})
	}
}
