package extract

import (
	"fmt"
	"strings"
)

// The little languages whose programs agents pass on the command line:
// sed scripts and awk programs. What they write, read or run is evidence
// like any argument; what the router cannot follow makes the command's
// arguments unknown (or opaque when it runs a command).

// sedScript records the files a sed script writes (w, W, s///w) or reads
// (r, R), and makes a script that runs commands (e, s///e) opaque.
func (x *extractor) sedScript(prog, script string, cwds []string) {
	origin := prog + " script"
	file := func(name string, kind Kind) {
		name = strings.TrimSpace(name)
		if name == "" {
			x.markUnknown(prog + ": a script command without its file")
			return
		}
		if name == "/dev/stdout" || name == "/dev/stderr" || name == "/dev/stdin" {
			return
		}
		x.path(name, false, kind, false, origin, cwds)
	}
	bad := func(format string, a ...any) {
		x.markUnknown(prog + ": " + fmt.Sprintf(format, a...) + ": the script is not understood")
	}
	s := script
	i := 0
	restOfLine := func() string {
		j := strings.IndexByte(s[i:], '\n')
		if j < 0 {
			j = len(s) - i
		}
		v := s[i : i+j]
		i += j
		return v
	}
	// delimited skips a delimited part (regex or replacement) and reports
	// whether it was closed.
	delimited := func(d byte) bool {
		for i < len(s) {
			c := s[i]
			switch {
			case c == '\\' && i+1 < len(s):
				i += 2
				continue
			case c == d:
				i++
				return true
			case c == '\n' && d != '\n':
				return false
			}
			i++
		}
		return false
	}
	skipSpace := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
	}
	address := func() bool {
		skipSpace()
		if i >= len(s) {
			return true
		}
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '~') {
				i++
			}
		case c == '$':
			i++
		case c == '/':
			i++
			if !delimited('/') {
				return false
			}
			for i < len(s) && (s[i] == 'I' || s[i] == 'M') {
				i++
			}
		case c == '\\' && i+1 < len(s):
			d := s[i+1]
			i += 2
			if !delimited(d) {
				return false
			}
			for i < len(s) && (s[i] == 'I' || s[i] == 'M') {
				i++
			}
		case c == '+' || c == '~':
			i++
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
		}
		return true
	}
	for i < len(s) {
		skipSpace()
		if i >= len(s) {
			break
		}
		switch s[i] {
		case '\n', ';', '}':
			i++
			continue
		case '#':
			restOfLine()
			continue
		}
		if !address() {
			bad("an unterminated address")
			return
		}
		skipSpace()
		if i < len(s) && s[i] == ',' {
			i++
			if !address() {
				bad("an unterminated address")
				return
			}
		}
		skipSpace()
		for i < len(s) && (s[i] == '!' || s[i] == ' ') {
			i++
		}
		if i >= len(s) {
			bad("an address without a command")
			return
		}
		c := s[i]
		i++
		switch c {
		case '{':
		case '=', 'd', 'D', 'g', 'G', 'h', 'H', 'n', 'N', 'p', 'P', 'x', 'z', 'F':
		case 'l', 'L', 'q', 'Q':
			skipSpace()
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
		case ':', 'b', 't', 'T', 'v':
			skipSpace()
			for i < len(s) && s[i] != ';' && s[i] != '\n' && s[i] != '}' {
				i++
			}
		case 'a', 'i', 'c':
			// Text to the end of the line (and the following lines while
			// each ends with a backslash).
			for {
				line := restOfLine()
				if !strings.HasSuffix(line, "\\") || i >= len(s) {
					break
				}
				i++
			}
		case 'r', 'R':
			file(restOfLine(), KindRead)
		case 'w', 'W':
			file(restOfLine(), KindEdit)
		case 'e':
			x.opaque(origin, prog+": the script runs a command (e)", KindExecute)
			restOfLine()
		case 's', 'y':
			if i >= len(s) || s[i] == '\n' || s[i] == '\\' {
				bad("%c without a delimiter", c)
				return
			}
			d := s[i]
			i++
			for range 2 { // the pattern, then the replacement
				if !delimited(d) {
					bad("an unterminated %c command", c)
					return
				}
			}
			if c == 'y' {
				continue
			}
			for i < len(s) {
				f := s[i]
				switch {
				case f == 'g' || f == 'p' || f == 'i' || f == 'I' || f == 'm' || f == 'M' || f >= '0' && f <= '9':
					i++
					continue
				case f == 'e':
					x.opaque(origin, prog+": the script runs its result as a command (s///e)", KindExecute)
					i++
					continue
				case f == 'w':
					i++
					file(restOfLine(), KindEdit)
				}
				break
			}
		default:
			bad("unknown command %q", c)
			return
		}
	}
}

// awkProgram records what an awk program does beyond reading its input:
// system(), pipes to and from commands (|), output redirected to files
// (print > "f"), getline from files. A literal file name is evidence; a
// computed one, a command, or a program the lexer cannot follow is not
// understood.
func (x *extractor) awkProgram(prog, src string, cwds []string) {
	origin := prog + " program"
	// Blank out string literals and regex literals so that only code is
	// left; keep literal strings to name redirect targets.
	code := []byte(src)
	type lit struct{ at, end int }
	var strs []lit
	prev := byte(0) // the last significant code character
	regexCanStart := func() bool {
		switch prev {
		case 0, '(', ',', '{', ';', '!', '~', '&', '|', '\n', '}', '?', ':':
			return true
		}
		return false
	}
	for i := 0; i < len(code); i++ {
		c := code[i]
		switch {
		case c == '#':
			for i < len(code) && code[i] != '\n' {
				code[i] = ' '
				i++
			}
			i--
			continue
		case c == '"':
			start := i
			i++
			for i < len(code) && code[i] != '"' && code[i] != '\n' {
				if code[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(code) || code[i] != '"' {
				x.markUnknown(prog + ": an unterminated string: the program is not understood")
				return
			}
			strs = append(strs, lit{start, i + 1})
			for k := start + 1; k < i; k++ {
				code[k] = '_'
			}
			prev = '"'
			continue
		case c == '/' && regexCanStart():
			i++
			for i < len(code) && code[i] != '/' {
				if code[i] == '\\' {
					code[i] = '_'
					i++
				}
				if i < len(code) {
					if code[i] == '\n' {
						x.markUnknown(prog + ": an unterminated regular expression: the program is not understood")
						return
					}
					code[i] = '_'
				}
				i++
			}
			if i >= len(code) {
				x.markUnknown(prog + ": an unterminated regular expression: the program is not understood")
				return
			}
			prev = '/'
			continue
		}
		if c != ' ' && c != '\t' && c != '\r' {
			prev = c
		}
	}
	text := string(code)
	literalAt := func(i int) (string, bool) {
		for i < len(text) && (text[i] == ' ' || text[i] == '\t') {
			i++
		}
		for _, l := range strs {
			if l.at == i {
				return src[l.at+1 : l.end-1], true
			}
		}
		return "", false
	}
	words := func(w string) bool {
		for i := 0; ; {
			j := strings.Index(text[i:], w)
			if j < 0 {
				return false
			}
			j += i
			before := j == 0 || !isWordByte(text[j-1])
			after := j+len(w) >= len(text) || !isWordByte(text[j+len(w)])
			if before && after {
				return true
			}
			i = j + len(w)
		}
	}
	if words("system") || strings.Contains(text, "|") && strings.Count(text, "|") != 2*strings.Count(text, "||") ||
		strings.Contains(text, "@load") || strings.Contains(text, "@include") {
		x.opaque(origin, prog+": the program runs commands (system or a pipe)", KindExecute)
		return
	}
	if words("ARGV") || words("ARGC") {
		// ARGV[1]="/home/u/.ssh/id_rsa" in BEGIN: the files read are named
		// at run time.
		x.opaque(origin, prog+": the program changes or reads ARGV: the files it reads are named at run time", KindRead)
	}
	// Redirections: > and >> inside print/printf statements, < after
	// getline.
	depth := 0
	inPrint := false
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ';', '\n', '{', '}':
			inPrint, depth = false, 0
		case 'p':
			if (i == 0 || !isWordByte(text[i-1])) && (strings.HasPrefix(text[i:], "print") && (i+5 >= len(text) || !isWordByte(text[i+5])) ||
				strings.HasPrefix(text[i:], "printf") && (i+6 >= len(text) || !isWordByte(text[i+6]))) {
				inPrint = true
			}
		case '>':
			if !inPrint || depth > 0 {
				continue
			}
			j := i + 1
			if j < len(text) && text[j] == '>' {
				j++
			}
			if name, ok := literalAt(j); ok && name != "" {
				if name != "/dev/stdout" && name != "/dev/stderr" {
					x.path(name, false, KindEdit, false, origin, cwds)
				}
			} else {
				x.markUnknown(prog + ": output redirected to a file named at run time")
			}
			i = j - 1
		case '<':
			k := strings.LastIndex(text[:i], "getline")
			if k < 0 || strings.TrimSpace(text[k+len("getline"):i]) != "" && !isAwkVar(strings.TrimSpace(text[k+len("getline"):i])) {
				continue // a comparison
			}
			if name, ok := literalAt(i + 1); ok && name != "" {
				x.path(name, false, KindRead, false, origin, cwds)
			} else {
				x.markUnknown(prog + ": getline from a file named at run time")
			}
		}
	}
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isAwkVar(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isWordByte(s[i]) && s[i] != '$' {
			return false
		}
	}
	return s != ""
}
