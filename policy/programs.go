package policy

import (
	"regexp"
	"slices"
	"strings"
)

// The programs the router knows beyond the shape of their arguments:
// which options take a value, which operands are written (DESIGN §6:
// destinations of known writers are kind edit), read recursively, or are
// hosts. Everything else is read by shape (roleAuto).

// role is what an argument of a program is.
type role uint8

const (
	roleAuto       role = iota // a path when it looks like one or names an existing file
	roleRead                   // a file the program reads
	roleEdit                   // a file the program writes
	roleSkip                   // not a path (a pattern, a mode, a message)
	roleURL                    // a URL, or a host name when it has no scheme
	roleHost                   // [user@]host
	roleRemote                 // [user@]host:path or a local path
	roleRemoteDest             // the same, as the destination: written when local
)

// flagSet holds the options a command line gave ("-r", "--recursive",
// "-d=recurse"); a handful, so a slice.
type flagSet []string

func (f flagSet) any(names ...string) bool {
	for _, n := range names {
		if slices.Contains(f, n) {
			return true
		}
	}
	return false
}

// progSpec describes the arguments of a program the router knows.
type progSpec struct {
	short   string          // short options that take a value
	long    []string        // long options that take a value
	optRole map[string]role // the role of an option's value (default roleAuto)
	// operand gives the role of operand i of n (nil: roleAuto).
	operand func(i, n int, f flagSet) role
	// patternFirst: the first operand is a pattern or script unless one
	// of these options supplied it.
	patternFirst []string
	// recursive: path operands are read with everything below them.
	recursive func(f flagSet) bool
	// readsHidden: a recursive read includes dotfiles (rg and ag skip
	// them unless told otherwise).
	readsHidden func(f flagSet) bool
	// implicitCwd: without a path operand the working directory is read
	// recursively.
	implicitCwd bool
	opaque      string // an option that makes the program run other code, and why
	opaqueOpts  []string
}

func all(r role) func(int, int, flagSet) role { return func(int, int, flagSet) role { return r } }

// lastEdit: the last operand is written, the others read (cp); with
// -t DIR every operand is read.
func lastEdit(i, n int, f flagSet) role {
	if f.any("-t", "--target-directory") || i < n-1 {
		return roleRead
	}
	return roleEdit
}

func firstSkipThenEdit(i, n int, f flagSet) role {
	if i == 0 && !f.any("--reference") {
		return roleSkip
	}
	return roleEdit
}

func flagged(names ...string) func(flagSet) bool {
	return func(f flagSet) bool { return f.any(names...) }
}

func always(flagSet) bool { return true }

var grepSpec = progSpec{
	short: "efABCDdmX", long: []string{"--regexp", "--file", "--after-context", "--before-context", "--context",
		"--directories", "--devices", "--max-count", "--include", "--exclude", "--exclude-dir", "--exclude-from", "--label",
		"--binary-files"},
	optRole: map[string]role{"-e": roleSkip, "--regexp": roleSkip, "-f": roleRead, "--file": roleRead,
		"--exclude-from": roleRead, "--include": roleSkip, "--exclude": roleSkip, "--exclude-dir": roleSkip},
	patternFirst: []string{"-e", "--regexp", "-f", "--file"},
	recursive: func(f flagSet) bool {
		return f.any("-r", "-R", "--recursive", "--dereference-recursive", "-d=recurse", "--directories=recurse")
	},
	readsHidden: always,
	implicitCwd: true,
}

var rgSpec = progSpec{
	short: "efgtTABCmjMErd", long: []string{"--regexp", "--file", "--glob", "--iglob", "--type", "--type-not",
		"--after-context", "--before-context", "--context", "--max-count", "--threads", "--max-columns", "--encoding",
		"--replace", "--ignore-file", "--sort", "--sortr", "--max-depth", "--max-filesize", "--colors",
		"--path-separator", "--type-add", "--pre", "--pre-glob", "--engine"},
	optRole: map[string]role{"-e": roleSkip, "--regexp": roleSkip, "-f": roleRead, "--file": roleRead,
		"-g": roleSkip, "--glob": roleSkip, "--iglob": roleSkip, "--ignore-file": roleRead, "-r": roleSkip, "--replace": roleSkip},
	patternFirst: []string{"-e", "--regexp", "-f", "--file"},
	recursive:    always,
	readsHidden:  flagged("--hidden", "-.", "-u", "--unrestricted", "-uu", "-uuu"),
	implicitCwd:  true,
	opaqueOpts:   []string{"--pre"},
	opaque:       "rg --pre runs a program on every file",
}

var curlSpec = progSpec{
	short: "AbCcDdEeFHhKmoQrTuwXxYyz", long: []string{"--output", "--upload-file", "--data", "--data-binary",
		"--data-raw", "--data-ascii", "--data-urlencode", "--form", "--config", "--header", "--request", "--user-agent",
		"--referer", "--user", "--proxy", "--cookie", "--cookie-jar", "--dump-header", "--write-out", "--range",
		"--max-time", "--cert", "--key", "--cacert", "--output-dir", "--url", "--connect-timeout", "--retry",
		"--resolve", "--json", "--form-string"},
	optRole: map[string]role{"-o": roleEdit, "--output": roleEdit, "-T": roleRead, "--upload-file": roleRead,
		"-K": roleRead, "--config": roleRead, "-c": roleEdit, "--cookie-jar": roleEdit, "-D": roleEdit,
		"--dump-header": roleEdit, "--cert": roleRead, "--key": roleRead, "--cacert": roleRead, "-E": roleRead,
		"--output-dir": roleEdit, "--url": roleURL, "-x": roleURL, "--proxy": roleURL,
		"-H": roleSkip, "--header": roleSkip, "-X": roleSkip, "--request": roleSkip, "-A": roleSkip,
		"--user-agent": roleSkip, "-u": roleSkip, "--user": roleSkip, "-w": roleSkip, "--write-out": roleSkip,
		"--form-string": roleSkip},
	operand: all(roleURL),
}

var wgetSpec = progSpec{
	short: "OoaPiUeTtwQ", long: []string{"--output-document", "--output-file", "--append-output",
		"--directory-prefix", "--input-file", "--post-file", "--body-file", "--load-cookies", "--save-cookies",
		"--user-agent", "--header", "--post-data", "--user", "--password", "--tries", "--timeout", "--wait", "--quota"},
	optRole: map[string]role{"-O": roleEdit, "--output-document": roleEdit, "-o": roleEdit, "--output-file": roleEdit,
		"-a": roleEdit, "--append-output": roleEdit, "-P": roleEdit, "--directory-prefix": roleEdit,
		"-i": roleRead, "--input-file": roleRead, "--post-file": roleRead, "--body-file": roleRead,
		"--load-cookies": roleRead, "--save-cookies": roleEdit, "-U": roleSkip, "--user-agent": roleSkip,
		"--header": roleSkip, "--post-data": roleSkip, "--user": roleSkip, "--password": roleSkip},
	operand: all(roleURL),
}

var scpSpec = progSpec{
	short: "cFiJloPS", optRole: map[string]role{"-F": roleRead, "-i": roleRead, "-J": roleHost, "-o": roleSkip,
		"-c": roleSkip, "-l": roleSkip, "-P": roleSkip},
	operand: func(i, n int, f flagSet) role {
		if i == n-1 {
			return roleRemoteDest
		}
		return roleRemote
	},
	recursive:   flagged("-r"),
	readsHidden: always,
	opaqueOpts:  []string{"-S"},
	opaque:      "scp -S runs another program as ssh",
}

// programs are the programs whose arguments the router reads more
// precisely than by their shape. Writers name the files they write
// (DESIGN §6: their destinations are kind edit).
var programs = map[string]progSpec{
	"rm":       {operand: all(roleEdit)},
	"rmdir":    {operand: all(roleEdit)},
	"unlink":   {operand: all(roleEdit)},
	"shred":    {short: "nsu", operand: all(roleEdit)},
	"touch":    {short: "rtd", optRole: map[string]role{"-r": roleRead, "-d": roleSkip, "-t": roleSkip}, operand: all(roleEdit)},
	"mkdir":    {short: "m", optRole: map[string]role{"-m": roleSkip}, operand: all(roleEdit)},
	"truncate": {short: "sr", optRole: map[string]role{"-s": roleSkip, "-r": roleRead}, operand: all(roleEdit)},
	"tee":      {operand: all(roleEdit)},
	"chmod":    {operand: firstSkipThenEdit},
	"chown":    {operand: firstSkipThenEdit},
	"chgrp":    {operand: firstSkipThenEdit},
	"cp": {short: "tS", long: []string{"--target-directory", "--suffix"}, optRole: map[string]role{"-t": roleEdit,
		"--target-directory": roleEdit, "-S": roleSkip}, operand: lastEdit,
		recursive: flagged("-r", "-R", "-a", "--recursive", "--archive"), readsHidden: always},
	"install": {short: "tmogS", long: []string{"--target-directory", "--mode", "--owner", "--group"},
		optRole: map[string]role{"-t": roleEdit, "--target-directory": roleEdit, "-m": roleSkip, "-o": roleSkip,
			"-g": roleSkip, "--mode": roleSkip, "--owner": roleSkip, "--group": roleSkip},
		operand: func(i, n int, f flagSet) role {
			if f.any("-d", "--directory") {
				return roleEdit
			}
			return lastEdit(i, n, f)
		}},
	"ln": {short: "tS", long: []string{"--target-directory"}, optRole: map[string]role{"-t": roleEdit,
		"--target-directory": roleEdit}, operand: lastEdit},
	"mv": {short: "tS", long: []string{"--target-directory", "--suffix"}, optRole: map[string]role{"-t": roleEdit,
		"--target-directory": roleEdit, "-S": roleSkip}, operand: all(roleEdit)},
	"sed": {short: "efl", long: []string{"--expression", "--file", "--line-length"},
		optRole: map[string]role{"-e": roleSkip, "--expression": roleSkip, "-f": roleRead, "--file": roleRead,
			"-l": roleSkip}, patternFirst: []string{"-e", "--expression", "-f", "--file"},
		operand: func(i, n int, f flagSet) role {
			if f.any("-i", "--in-place") {
				return roleEdit
			}
			return roleRead
		}},
	"perl": {short: "eEIMm", optRole: map[string]role{"-e": roleSkip, "-E": roleSkip, "-I": roleAuto, "-M": roleSkip,
		"-m": roleSkip}, patternFirst: []string{"-e", "-E"},
		operand: func(i, n int, f flagSet) role {
			if f.any("-i") {
				return roleEdit
			}
			return roleAuto
		}},
	"dd": {}, // if= and of= are handled in operands
	"sort": {short: "okStT", long: []string{"--output", "--key", "--buffer-size", "--field-separator",
		"--temporary-directory", "--files0-from"}, optRole: map[string]role{"-o": roleEdit, "--output": roleEdit,
		"-k": roleSkip, "--key": roleSkip, "-S": roleSkip, "-t": roleSkip, "--files0-from": roleRead},
		operand: all(roleRead)},
	"patch": {short: "dipoBrz", long: []string{"--directory", "--input", "--strip", "--output"},
		optRole: map[string]role{"-i": roleRead, "--input": roleRead, "-o": roleEdit, "--output": roleEdit,
			"-p": roleSkip, "--strip": roleSkip, "-d": roleEdit, "--directory": roleEdit},
		operand: func(i, n int, f flagSet) role {
			if i == 0 {
				return roleEdit
			}
			return roleRead
		}},
	"cat": {operand: all(roleRead)}, "head": {short: "nc", optRole: map[string]role{"-n": roleSkip, "-c": roleSkip},
		operand: all(roleRead)},
	"tail": {short: "ncs", optRole: map[string]role{"-n": roleSkip, "-c": roleSkip, "-s": roleSkip},
		operand: all(roleRead)},
	"less": {operand: all(roleRead)}, "more": {operand: all(roleRead)},
	"grep": grepSpec, "egrep": grepSpec, "fgrep": grepSpec, "zgrep": grepSpec,
	"rg": rgSpec,
	"ag": {short: "ABCGgm", optRole: map[string]role{"-G": roleSkip, "-g": roleSkip}, patternFirst: []string{},
		recursive: always, readsHidden: flagged("--hidden", "-u", "--unrestricted"), implicitCwd: true},
	"ack": {short: "ABCm", patternFirst: []string{}, recursive: always, readsHidden: always, implicitCwd: true},
	"awk": {short: "fvF", optRole: map[string]role{"-f": roleRead, "-v": roleSkip, "-F": roleSkip},
		patternFirst: []string{"-f"}, operand: all(roleRead)},
	"curl": curlSpec, "wget": wgetSpec,
	"ssh": {short: "BbcDEeFIiJLlmOopQRSWw", optRole: map[string]role{"-F": roleRead, "-i": roleRead,
		"-E": roleEdit, "-J": roleHost, "-l": roleSkip, "-p": roleSkip, "-o": roleSkip, "-L": roleSkip,
		"-R": roleSkip, "-D": roleSkip, "-W": roleSkip, "-b": roleSkip, "-c": roleSkip, "-m": roleSkip, "-O": roleSkip,
		"-Q": roleSkip, "-S": roleRead, "-w": roleSkip, "-e": roleSkip, "-B": roleSkip, "-I": roleSkip},
		operand: func(i, n int, f flagSet) role {
			if i == 0 {
				return roleHost
			}
			return roleSkip // the remote command runs on the other host
		}},
	"scp": scpSpec, "sftp": {short: "BbcDFiJlooPRS", optRole: map[string]role{"-F": roleRead, "-i": roleRead,
		"-b": roleRead}, operand: all(roleHost)},
	"rsync": {short: "eBfT", long: []string{"--rsh", "--exclude", "--include", "--filter", "--exclude-from",
		"--include-from", "--files-from", "--temp-dir", "--partial-dir", "--backup-dir", "--rsync-path"},
		optRole: map[string]role{"--exclude": roleSkip, "--include": roleSkip, "--filter": roleSkip, "-f": roleSkip,
			"--exclude-from": roleRead, "--include-from": roleRead, "--files-from": roleRead},
		operand: scpSpec.operand, recursive: flagged("-r", "-a", "--recursive", "--archive"), readsHidden: always,
		opaqueOpts: []string{"-e", "--rsh", "--rsync-path"}, opaque: "rsync -e runs another program as its shell"},
	"nc": {short: "psiwqxXOIT", operand: hostFirst}, "ncat": {short: "psiwxX", operand: hostFirst},
	"netcat": {short: "psiwqx", operand: hostFirst}, "telnet": {operand: hostFirst},
	"find": {}, // handled by findArgs
	"tar":  {}, // handled by tarArgs
	"zip": {short: "bnstx", optRole: map[string]role{"-x": roleSkip, "-b": roleSkip, "-n": roleSkip, "-t": roleSkip},
		operand: func(i, n int, f flagSet) role {
			if i == 0 {
				return roleEdit
			}
			return roleRead
		}, recursive: flagged("-r", "-R"), readsHidden: always},
	"unzip": {short: "dx", optRole: map[string]role{"-d": roleEdit, "-x": roleSkip},
		operand: func(i, n int, f flagSet) role {
			if i == 0 {
				return roleRead
			}
			return roleSkip
		}},
	// git's global options; gitSubSpec has its subcommands'. A global -c
	// or --config-env is opaque (operands).
	"git": {short: "Cc", long: []string{"--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"},
		optRole: map[string]role{"-c": roleSkip, "--config-env": roleSkip, "--namespace": roleSkip, "--super-prefix": roleSkip}},
}

// gitGlobalValues are git's global options that take a separate value.
var gitGlobalValues = []string{"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"}

// gitSubcommand returns the index in args (git's arguments) of the
// subcommand, len(args) if there is none: the first argument that is not
// a global option or its value.
func gitSubcommand(args []arg) int {
	for i := 0; i < len(args); i++ {
		s := args[i].s
		if args[i].opaque != "" || !strings.HasPrefix(s, "-") || s == "-" {
			return i
		}
		if s == "--" {
			return i + 1
		}
		if slices.Contains(gitGlobalValues, s) {
			i++
		}
	}
	return len(args)
}

// gitSubValues are, per subcommand, its short options that take a value
// which is never a path (a branch or a commit): git switch -c NAME, git
// checkout -b NAME, git commit -C COMMIT.
var gitSubValues = map[string]string{"switch": "cC", "checkout": "bB", "worktree": "bB", "commit": "cCm",
	"tag": "m", "merge": "m", "stash": "m", "notes": "m", "revert": "m", "cherry-pick": "m"}

// gitSubSpec is the spec of a git subcommand's arguments.
func gitSubSpec(sub string) progSpec {
	short := gitSubValues[sub]
	sp := progSpec{short: short, long: []string{"--message", "--author", "--date", "--create", "--force-create", "--orphan"},
		optRole: map[string]role{"--message": roleSkip, "--author": roleSkip, "--date": roleSkip,
			"--create": roleSkip, "--force-create": roleSkip, "--orphan": roleSkip}}
	for _, c := range short {
		sp.optRole["-"+string(c)] = roleSkip
	}
	return sp
}

func hostFirst(i, n int, f flagSet) role {
	if i == 0 {
		return roleHost
	}
	return roleSkip
}

// noPathPrograms take arguments that are never paths.
var noPathPrograms = map[string]bool{"echo": true, "printf": true, "true": true, "false": true, ":": true,
	"expr": true, "seq": true, "sleep": true, "date": true, "basename": true, "dirname": true, "kill": true,
	"exit": true, "return": true, "shift": true, "wait": true, "jobs": true, "export": true, "unset": true,
	"set": true, "shopt": true, "type": true, "which": true, "hash": true, "umask": true, "ulimit": true,
	"yes": true, "id": true, "whoami": true, "hostname": true, "uname": true, "pwd": true, "printenv": true,
	"local": true, "declare": true, "readonly": true, "typeset": true, "let": true, "getopts": true, "read": true,
	"break": true, "continue": true}

// gitOpaqueConfig matches git -c settings that make git run a command.
var gitOpaqueConfig = regexp.MustCompile(`(?i)^(alias\.|core\.(pager|sshcommand|editor|fsmonitor|hookspath|askpass|gitproxy)|diff\..*\.(command|textconv)|diff\.external|filter\.|credential\.|sequence\.editor|gpg\.program|merge\..*\.driver|uploadpack\.|receivepack\.|protocol\.ext)`)
