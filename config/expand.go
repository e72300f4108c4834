package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// expandEnv replaces ${NAME} with the value of the environment variable
// NAME, ${NAME:-default} with default when NAME is unset or empty, and $$
// with $. A $ followed by anything else is kept as it is.
func expandEnv(s string, env func(string) (string, bool)) (string, error) {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '$')
		if i < 0 || i == len(s)-1 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			s = s[i+2:]
		case '{':
			ref, rest, ok := strings.Cut(s[i+2:], "}")
			if !ok {
				return "", fmt.Errorf("missing } after ${ in %q", s[i:])
			}
			name, def, hasDef := strings.Cut(ref, ":-")
			if !envName.MatchString(name) {
				return "", fmt.Errorf("invalid environment variable name %q in ${%s} (write $$ for a literal $)", name, ref)
			}
			v, set := env(name)
			switch {
			case hasDef && v == "":
				v = def
			case !set:
				return "", fmt.Errorf("environment variable %q is not set", name)
			}
			b.WriteString(v)
			s = rest
		default:
			b.WriteByte('$')
			s = s[i+1:]
		}
	}
}

// expandHome replaces a leading ~ or ~/ with home.
func expandHome(s, home string) (string, error) {
	if s != "~" && !strings.HasPrefix(s, "~/") {
		return s, nil
	}
	if home == "" {
		return "", errors.New("cannot expand ~: HOME is not set")
	}
	return home + s[1:], nil
}

// findCommand checks that name can be started as a program. Like
// exec.LookPath, a name without a slash is searched in pathList (a PATH
// value), skipping relative entries as os/exec does. A relative name with a
// slash is relative to cwd when cwd is set (os/exec resolves it against
// Cmd.Dir), else to the current directory.
func findCommand(name, cwd, pathList string) error {
	if strings.Contains(name, "/") {
		if cwd != "" && !filepath.IsAbs(name) {
			name = filepath.Join(cwd, name)
		}
		return checkExecutable(name)
	}
	for _, dir := range filepath.SplitList(pathList) {
		if filepath.IsAbs(dir) && checkExecutable(filepath.Join(dir, name)) == nil {
			return nil
		}
	}
	return fmt.Errorf("%q not found in PATH", name)
}

func checkExecutable(file string) error {
	fi, err := os.Stat(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%q does not exist", file)
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%q is a directory", file)
	case fi.Mode()&0o111 == 0:
		return fmt.Errorf("%q is not executable", file)
	}
	return nil
}
