package extract

import (
	_ "embed"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The wrappers (env, timeout, sudo, xargs, nsenter, ...) are data,
// wrappers.yaml beside the program specs: a wrapper gained or an option
// added is a data change. Its format is the file's own header.

//go:embed wrappers.yaml
var wrapperData []byte

// wrapperKeys are the keys of a wrapper in wrappers.yaml.
var wrapperKeys = []string{"short", "flags", "short_optional", "long", "long_flags", "long_optional", "skip", "assigns",
	"primary", "digits", "chdir", "note"}

func mustLoadWrappers(file string, data []byte) map[string]wrapSpec {
	m, err := parseWrappers(file, data)
	if err != nil {
		panic(err)
	}
	return m
}

// parseWrappers reads a wrappers file; an error names its file:line:col.
func parseWrappers(file string, data []byte) (map[string]wrapSpec, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	out := map[string]wrapSpec{}
	if len(root.Content) == 0 {
		return out, nil
	}
	top := root.Content[0]
	errf := func(n *yaml.Node, format string, a ...any) error {
		return fmt.Errorf("%s:%d:%d: %s", file, n.Line, n.Column, fmt.Sprintf(format, a...))
	}
	if top.Kind != yaml.MappingNode {
		return nil, errf(top, "a wrappers file is a mapping of program names to wrappers")
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if _, dup := out[k.Value]; dup {
			return nil, errf(k, "wrapper %q is listed twice", k.Value)
		}
		if k.Value == "" || strings.ContainsAny(k.Value, "/ \t") {
			return nil, errf(k, "%q is not a program name", k.Value)
		}
		if v.Kind != yaml.MappingNode {
			return nil, errf(v, "%s: a wrapper is a mapping of %s", k.Value, strings.Join(wrapperKeys, ", "))
		}
		var w wrapSpec
		for j := 0; j+1 < len(v.Content); j += 2 {
			key, val := v.Content[j], v.Content[j+1]
			var err error
			switch key.Value {
			case "short":
				w.short, err = wrapLetters(val)
			case "flags":
				w.flags, err = wrapLetters(val)
			case "short_optional":
				w.shortOpt, err = wrapLetters(val)
			case "long":
				w.long, err = wrapLongs(val)
			case "long_flags":
				w.longFlags, err = wrapLongs(val)
			case "long_optional":
				w.longOpt, err = wrapLongs(val)
			case "skip":
				if err = val.Decode(&w.skip); err == nil && w.skip < 0 {
					err = fmt.Errorf("must not be negative")
				}
			case "assigns":
				err = val.Decode(&w.assigns)
			case "primary":
				err = val.Decode(&w.primary)
			case "digits":
				err = val.Decode(&w.digits)
			case "chdir":
				err = val.Decode(&w.chdir)
			case "note":
				err = val.Decode(&w.note)
			default:
				return nil, errf(key, "%s: unknown key %q (want %s)", k.Value, key.Value, strings.Join(wrapperKeys, ", "))
			}
			if err != nil {
				return nil, errf(val, "%s: %s: %v", k.Value, key.Value, err)
			}
		}
		out[k.Value] = w
	}
	return out, nil
}

// wrapLetters reads a string of option letters.
func wrapLetters(n *yaml.Node) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("want a string of option letters")
	}
	for _, c := range n.Value {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return "", fmt.Errorf("%q is not an option letter", c)
		}
	}
	return n.Value, nil
}

// wrapLongs reads a list of long options.
func wrapLongs(n *yaml.Node) ([]string, error) {
	var l []string
	if err := n.Decode(&l); err != nil {
		return nil, fmt.Errorf("want a list of long options")
	}
	for _, o := range l {
		if len(o) < 3 || !strings.HasPrefix(o, "--") || strings.ContainsAny(o, "= \t") {
			return nil, fmt.Errorf("%q is not a long option (--name)", o)
		}
	}
	return l, nil
}
