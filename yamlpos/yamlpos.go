// Package yamlpos reads strict YAML with positions for the config and
// policy loaders: exactly one document, every problem reported as
// FILE:LINE:COL, and the small helpers their messages share.
package yamlpos

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Pos is a position in a YAML file.
type Pos struct {
	File      string
	Line, Col int
}

// String formats p as FILE:LINE:COL.
func (p Pos) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col) }

// At is the position of n in file.
func At(file string, n *yaml.Node) Pos { return Pos{file, n.Line, n.Column} }

// Error is one problem at the position of the YAML node that caused it.
type Error struct {
	Pos Pos
	Msg string
}

func (e *Error) Error() string { return e.Pos.String() + ": " + e.Msg }

// Document decodes data into a node tree and returns its root: exactly one
// non-empty YAML document. what names the file in messages ("config
// file").
func Document(file string, data []byte, what string) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, &Error{Pos{file, 1, 1}, what + " is empty"}
	} else if err != nil {
		return nil, syntaxError(file, data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{At(file, &extra), "only one YAML document is allowed"}
	} else if !errors.Is(err, io.EOF) {
		return nil, syntaxError(file, data, err)
	}
	root := doc.Content[0]
	if root.ShortTag() == "!!null" && root.Value == "" { // "---" alone
		return nil, &Error{Pos{file, 1, 1}, what + " is empty"}
	}
	return root, nil
}

var syntaxLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parserProblems are the yaml.v3 messages that come from its parser rather
// than its scanner. yaml.v3 prints the 0-based line for these (it adds 1
// only for scanner errors), so we add the 1 it forgot.
var parserProblems = []string{
	"did not find expected <stream-start>",
	"did not find expected <document start>",
	"found undefined tag handle",
	"did not find expected node content",
	"did not find expected '-' indicator",
	"did not find expected key",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found duplicate %TAG directive",
}

// syntaxError turns a yaml.v3 syntax error ("yaml: line N: msg") into an
// *Error. yaml.v3 does not expose the column, so it is 1 unless the line is
// one offendingLine found.
func syntaxError(file string, data []byte, err error) *Error {
	m := syntaxLine.FindStringSubmatch(err.Error())
	if m == nil {
		// yaml.v3 leaves out the line when the problem is on the first one.
		return &Error{Pos{file, 1, 1}, strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	line, _ := strconv.Atoi(m[1])
	if !slices.Contains(parserProblems, m[2]) {
		return &Error{Pos{file, line, 1}, m[2]}
	}
	line++
	switch bad, col := offendingLine(data, m[0]); {
	case bad > line:
		return &Error{Pos{file, bad, col}, fmt.Sprintf("%s (in the block that starts at line %d: check this line's indentation)", m[2], line)}
	case bad == line:
		return &Error{Pos{file, bad, col}, m[2]}
	}
	return &Error{Pos{file, line, 1}, m[2]}
}

// offendingLine finds the line a parser error is about, and the column of
// its first character. yaml.v3 reports a parser error at the start of the
// enclosing block (its context mark), which for an indentation mistake
// can be many lines above it; the problem mark, the line itself, is not
// exposed. The shortest prefix of whole lines that fails with the same
// problem in the same block (the same message) ends on that line: the
// lines before it parse. 0 when no prefix fails that way (the problem only
// shows at the end, say).
func offendingLine(data []byte, msg string) (line, col int) {
	end := 0
	for n := 1; end < len(data); n++ {
		next := bytes.IndexByte(data[end:], '\n')
		if next < 0 {
			next = len(data)
		} else {
			next += end + 1
		}
		text := data[end:next]
		end = next
		var node yaml.Node
		err := yaml.Unmarshal(data[:end], &node)
		if err == nil {
			continue
		}
		if err.Error() == msg {
			return n, len(text) - len(bytes.TrimLeft(text, " \t")) + 1
		}
	}
	return 0, 0
}

// Deref resolves a YAML alias (*name) to the node it names, and a document
// to its root.
func Deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		return Deref(n.Content[0])
	}
	return n
}

// Describe names the kind of n for "expected X, got Y" messages.
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!null":
		return "an empty value"
	case "!!bool":
		return "a boolean"
	case "!!int", "!!float":
		return "a number"
	}
	return fmt.Sprintf("the string %q", n.Value)
}

// Suggest returns ` (did you mean "x"?)` for the candidate closest to key,
// if one is within an edit distance of 2, else "".
func Suggest(key string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		if d := editDistance(key, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// Pair is one key and its value in a YAML mapping, aliases resolved.
type Pair struct{ Key, Val *yaml.Node }

// Mapping returns the pairs of mapping n (at path, for messages), reporting
// through errorf a node of another kind, keys that are not scalars and
// duplicate keys. ok is false when n is not a mapping.
func Mapping(path string, n *yaml.Node, errorf func(at *yaml.Node, path, format string, args ...any)) (pairs []Pair, ok bool) {
	if n.Kind != yaml.MappingNode {
		errorf(n, path, "expected a mapping, got %s", Describe(n))
		return nil, false
	}
	pairs = make([]Pair, 0, len(n.Content)/2)
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := Deref(n.Content[i]), Deref(n.Content[i+1])
		switch {
		case k.Kind != yaml.ScalarNode:
			errorf(k, path, "expected a key, got %s", Describe(k))
		case seen[k.Value] != nil:
			errorf(k, "", "duplicate key %q (first at line %d)", k.Value, seen[k.Value].Line)
		default:
			seen[k.Value] = k
			pairs = append(pairs, Pair{k, v})
		}
	}
	return pairs, true
}
