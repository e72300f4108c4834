package extract

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// The argument specs of the programs the router knows, as data: one YAML
// file per program or family in specs/ (see specs/README.md for the
// format). A spec lists every option of its program with the role of the
// option's value and the role of every operand. An option a spec does not
// list, an operand beyond the ones it has roles for, or a program without a
// spec makes the command's arguments unknown (Item.Unknown): closed-world
// allow (issue 14).

//go:embed specs/*.yaml
var specFS embed.FS

// role is what an argument of a program is.
type role uint8

const (
	roleUnknown        role = iota // not known: by shape, read and written, and the command is Unknown
	roleFlag                       // an option without a value
	roleValue                      // a plain value: never a file, host or command
	roleRead                       // a file the program reads
	roleWrite                      // a file the program writes (kind edit)
	roleReadDir                    // a file or directory read with everything below it
	roleWriteDir                   // a directory written with everything below it
	roleChdir                      // a directory the program changes to: later relative paths resolve below it
	roleCommand                    // a command line the program runs (split into words and analysed)
	roleScript                     // shell code the program runs (parsed)
	roleCode                       // code in another language (python -c): opaque
	roleSed                        // a sed script (its w, r, e commands)
	roleAwk                        // an awk program (system, pipes, redirections)
	roleGitConfig                  // git -c NAME=VALUE
	roleRevPath                    // git REV:PATH object names: the path is read
	rolePathspec                   // git revisions and pathspecs: REV:PATH reads PATH, any other word is a path read
	roleData                       // curl -d: @FILE reads a file
	roleForm                       // curl -F: NAME=@FILE or NAME=<FILE reads a file
	roleURL                        // a URL, or a host name when it has no scheme
	roleHost                       // [user@]host
	roleRemote                     // [user@]host:path or a local path (read)
	roleRemoteDest                 // the same, as the destination: written when local
	roleExec                       // this and every later operand are a command the program runs
	roleOpaque                     // the program runs something the router cannot see
	roleArgs                       // arguments of code the program runs: by shape, read and written
	roleHosts                      // HOST:PORT:HOST2:PORT2 (curl --connect-to, --resolve): every host named
	roleConfig                     // a file of more options or URLs the router does not read (curl -K, wget -i)
	roleProgram                    // a file of code the program runs (python FILE); - is code from stdin
	roleLdflags                    // go -ldflags: linker flags; -extld and -linkmode name programs
	rolePlugin                     // pytest -p NAME: loads a plugin (code); -p no:NAME disables one
	roleJq                         // a jq filter: import and include load files it names
	roleNameList                   // a file (or - for stdin) listing the names of files the program reads
	roleSocket                     // a local socket the program connects to: the server acts on what it sends (edit)
	roleSSHOption                  // ssh -o KEY=VALUE: a setting of ssh_config(5), some of which run commands
	rolePythonX                    // python -X NAME[=VALUE]: an implementation option, pycache_prefix a directory written
	roleTypeDest                   // TYPE[:DEST] (pytest --cov-report html:DIR): DEST is written, with everything below it
	roleMakeArg                    // a make target or variable definition (NAME=VALUE, NAME:=VALUE, NAME!=COMMAND, ...)
	roleDateArg                    // date's operand: +FORMAT, or the time it sets the system clock to (unknown)
	roleNpmPackage                 // an npm package spec: a registry name, or a repository, URL or path (packages.go)
	rolePipRequirement             // a pip requirement: a name, NAME @ URL, a VCS URL or a path (packages.go)
	roleGoModule                   // go get's and go install's operand: a module path and version, or a local package
	roleGitSource                  // a repository URL whose code the program builds and runs (cargo install --git)
	roleSplit                      // a wrapper's option whose words, split at blanks, start its payload (env -S)
)

var roleNames = map[string]role{
	"unknown": roleUnknown, "flag": roleFlag, "value": roleValue, "read": roleRead, "write": roleWrite,
	"readdir": roleReadDir, "writedir": roleWriteDir, "chdir": roleChdir, "command": roleCommand,
	"script": roleScript, "code": roleCode, "sed": roleSed, "awk": roleAwk, "git-config": roleGitConfig,
	"revpath": roleRevPath, "pathspec": rolePathspec, "data": roleData, "form": roleForm, "url": roleURL,
	"host": roleHost, "remote": roleRemote, "remote-dest": roleRemoteDest, "exec": roleExec, "opaque": roleOpaque,
	"args": roleArgs, "hosts": roleHosts, "config": roleConfig,
	"program": roleProgram, "ldflags": roleLdflags, "plugin": rolePlugin, "jq": roleJq, "names": roleNameList,
	"socket": roleSocket, "ssh-option": roleSSHOption, "python-x": rolePythonX, "type-dest": roleTypeDest, "make-arg": roleMakeArg,
	"date-arg": roleDateArg, "npm-package": roleNpmPackage, "pip-requirement": rolePipRequirement, "go-module": roleGoModule,
	"git-source": roleGitSource, "split": roleSplit,
}

// optSpec is one option of a program.
type optSpec struct {
	name     string // the canonical name, for the flag set
	role     role   // roleFlag: takes no value
	optional bool   // the value is only given attached (--color=auto, -O2)
}

// operandRule gives the roles of the operands when the command line has
// one of the flags in ifAny (or always when ifAny is empty).
type operandRule struct {
	ifAny  []string
	prefix []role
	rest   role
	repeat bool // rest is repeated (an item ending in ...)
	suffix []role
}

// argSpec is a compiled program spec.
type argSpec struct {
	name string
	// single: options are whole words after - or -- (Go's flag package,
	// find): -toolexec=x, --toolexec x; no bundling of letters.
	single bool
	// gcc: single, and an option that takes a value also takes it
	// attached without = (-Iinclude, -lm, -O2, -Wall, -DX=1): the longest
	// such option the word starts with; an operand @FILE holds options.
	gcc bool
	// argfiles: an operand @FILE holds more arguments, which the router
	// does not read (gcc style; rustc).
	argfiles bool
	// abbrev: a long option may be given as an unambiguous prefix of
	// two letters or more (git, argparse); getopt: of one letter or more,
	// as getopt_long takes it (env --u is --unset).
	abbrev, getopt bool
	// posix: the first operand ends the options.
	posix bool
	// values: every argument is a plain value, whatever it looks like
	// (echo, printf).
	values bool
	// defaultOperand: the operand the program uses when given none (ls
	// lists ".").
	defaultOperand string
	// passthrough: every argument is an operand, options included
	// (yarn test ARGS: they are the script's).
	passthrough bool
	// digits: -NUM is an option (head -5, nice -10).
	digits      bool
	opts        map[string]*optSpec
	longs       []string // long option names, sorted, for abbreviations
	operands    []operandRule
	recursive   []string
	recAlways   bool
	inPlace     []string // flags that make read operands written (sed -i)
	endsOpts    []string // options after which every argument is an operand (python -c, -m)
	hidden      []string // flags that make a recursive read include dotfiles
	hideDots    bool     // a recursive read skips dotfiles unless one of hidden is given
	implicitCwd bool
	// content: options that make git print the content of the files it
	// shows from the repository's objects (log -p); "default" in the
	// spec: it does unless one of noContent is given (show, diff).
	content        []string
	contentDefault bool
	noContent      []string
	// worktree: git writes files of the work tree that its operands do
	// not name, from another revision: always (pull, stash pop, merge),
	// when an operand is a revision (checkout, switch), or with one of
	// the options listed (reset --hard).
	wtAlways, wtRevision bool
	wtFlags              []string
	handler              string // find, tar, dd: read by code
	subs                 map[string]*argSpec
	subOptional          bool // the program also runs without a subcommand (operands then follow operands:)
	// toolchain: a first argument +NAME picks the toolchain that runs
	// (rustup's proxies: cargo +nightly build).
	toolchain bool
	// modules: python -m MODULE runs MODULE as the program named here
	// (pytest, pip): the operands are read with that program's spec;
	// "unknown": its arguments are not understood (timeit, http.server).
	modules map[string]string
	// walk: how it walks a recursive operand (walkmodel.go); nil: it
	// reads everything below, every symlink followed. Subcommands inherit
	// it.
	walk *walkSpec
	// wrap: the program runs a command given as its operands (wrapper.go).
	wrap *wrapSpec
}

// specs returns the compiled specs by program name (aliases included),
// loaded on first use: every re-run of the router's executable (an
// agent's watchdog, the sandbox helpers) imports this package, and
// loading them costs ~7 MB and tens of milliseconds that those processes
// never need.
var specs = sync.OnceValue(func() map[string]*argSpec { return mustLoadSpecs(specFS) })

func mustLoadSpecs(fsys fs.FS) map[string]*argSpec {
	m, err := loadSpecs(fsys)
	if err != nil {
		panic(err)
	}
	return m
}

// loadSpecs reads every specs/*.yaml file of fsys.
func loadSpecs(fsys fs.FS) (map[string]*argSpec, error) {
	files, err := fs.Glob(fsys, "specs/*.yaml")
	if err != nil {
		return nil, err
	}
	out := map[string]*argSpec{}
	for _, f := range files {
		data, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		if err := parseSpecs(f, data, out); err != nil {
			return nil, err
		}
	}
	for name, sp := range out {
		for mod, prog := range sp.modules {
			if prog != moduleUnknown && out[prog] == nil {
				return nil, fmt.Errorf("%s: modules: %s names %s, which has no spec", name, mod, prog)
			}
		}
	}
	return out, nil
}

// specKeys are the keys of a program spec.
var specKeys = []string{"aliases", "style", "abbrev", "options", "common", "operands", "recursive", "hidden",
	"implicit_cwd", "argfiles", "handler", "subcommands", "subcommand_optional", "digits", "in_place", "posix", "passthrough", "default_operand", "ends_options", "modules", "content", "no_content", "worktree", "toolchain", "walk", "wrapper"}

// parseSpecs parses one spec file into out.
func parseSpecs(file string, data []byte, out map[string]*argSpec) error {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return fmt.Errorf("%s: %v", file, err)
	}
	if len(root.Content) == 0 {
		return nil
	}
	top := root.Content[0]
	if top.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: a spec file is a mapping of program names to specs", file, top.Line)
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		sp, err := parseSpec(file, k.Value, v, nil, nil)
		if err != nil {
			return err
		}
		names := append([]string{k.Value}, sp.aliasesOf(v)...)
		for _, n := range names {
			if _, dup := out[n]; dup {
				return fmt.Errorf("%s:%d: program %q has a second spec", file, k.Line, n)
			}
			out[n] = sp
		}
	}
	return nil
}

func (sp *argSpec) aliasesOf(n *yaml.Node) []string {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "aliases" {
			var a []string
			_ = n.Content[i+1].Decode(&a)
			return a
		}
	}
	return nil
}

// parseSpec parses the spec of program name; common holds options the
// parent passes to a subcommand. A subcommand has its parent's style and
// abbrev unless it sets its own.
func parseSpec(file, name string, n *yaml.Node, common map[string]*optSpec, parent *argSpec) (*argSpec, error) {
	errf := func(n *yaml.Node, format string, a ...any) error {
		return fmt.Errorf("%s:%d:%d: %s: %s", file, n.Line, n.Column, name, fmt.Sprintf(format, a...))
	}
	sp := &argSpec{name: name, abbrev: true, opts: map[string]*optSpec{}}
	if parent != nil {
		sp.single, sp.gcc, sp.abbrev, sp.getopt, sp.argfiles = parent.single, parent.gcc, parent.abbrev, parent.getopt, parent.argfiles
		sp.walk = parent.walk
	}
	if n.Kind == yaml.ScalarNode && n.Value == "" || n.Tag == "!!null" {
		return sp, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, errf(n, "a spec is a mapping (%s)", strings.Join(specKeys, ", "))
	}
	var commonOpts map[string]*optSpec
	var subsNode, wrapNode *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "wrapper" {
			wrapNode = n.Content[i+1] // its options and operands are read as a wrapper's
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		var err error
		switch k.Value {
		case "aliases":
			var a []string
			if err = v.Decode(&a); err != nil {
				return nil, errf(v, "aliases: a list of names")
			}
		case "style":
			switch v.Value {
			case "gnu":
				sp.single, sp.gcc, sp.abbrev = false, false, true
			case "single":
				sp.single, sp.gcc, sp.abbrev = true, false, false
			case "gcc":
				sp.single, sp.gcc, sp.abbrev, sp.argfiles = true, true, false, true
			case "posix":
				sp.posix = true
			case "values":
				sp.values = true
			default:
				return nil, errf(v, "style must be gnu, single, gcc, posix or values, not %q", v.Value)
			}
		case "abbrev":
			if v.Kind == yaml.ScalarNode && v.Value == "getopt" {
				sp.abbrev, sp.getopt = true, true
			} else if err = v.Decode(&sp.abbrev); err == nil {
				sp.getopt = false
			}
		case "digits":
			err = v.Decode(&sp.digits)
		case "argfiles":
			err = v.Decode(&sp.argfiles)
		case "posix":
			err = v.Decode(&sp.posix)
		case "passthrough":
			err = v.Decode(&sp.passthrough)
		case "default_operand":
			err = v.Decode(&sp.defaultOperand)
		case "implicit_cwd":
			err = v.Decode(&sp.implicitCwd)
		case "subcommand_optional":
			err = v.Decode(&sp.subOptional)
		case "handler":
			if !slices.Contains([]string{"find", "tar", "dd"}, v.Value) {
				return nil, errf(v, "unknown handler %q (find, tar, dd)", v.Value)
			}
			sp.handler = v.Value
		case "options", "common":
			m := sp.opts
			if k.Value == "common" {
				commonOpts = map[string]*optSpec{}
				m = commonOpts
			}
			if err := parseOptions(v, m, wrapNode != nil, errf); err != nil {
				return nil, err
			}
		case "operands":
			if sp.operands, err = parseOperands(v, wrapNode != nil, errf); err != nil {
				return nil, err
			}
		case "recursive":
			if v.Kind == yaml.ScalarNode && v.Value == "always" {
				sp.recAlways = true
			} else {
				err = v.Decode(&sp.recursive)
			}
		case "in_place":
			err = v.Decode(&sp.inPlace)
		case "content":
			if err = v.Decode(&sp.content); err == nil {
				if i := slices.Index(sp.content, "default"); i >= 0 {
					sp.contentDefault = true
					sp.content = slices.Delete(sp.content, i, i+1)
				}
				if sp.content == nil {
					sp.content = []string{}
				}
			}
		case "no_content":
			err = v.Decode(&sp.noContent)
		case "worktree":
			switch {
			case v.Kind == yaml.ScalarNode && v.Value == "always":
				sp.wtAlways = true
			case v.Kind == yaml.ScalarNode && v.Value == "revision":
				sp.wtRevision = true
			default:
				err = v.Decode(&sp.wtFlags)
			}
		case "ends_options":
			err = v.Decode(&sp.endsOpts)
		case "modules":
			err = v.Decode(&sp.modules)
		case "toolchain":
			err = v.Decode(&sp.toolchain)
		case "hidden":
			sp.hideDots = true
			err = v.Decode(&sp.hidden)
		case "walk":
			sp.walk, err = parseWalk(v)
		case "wrapper":
			if sp.wrap, err = parseWrapper(v, errf); err != nil {
				return nil, err
			}
		case "subcommands":
			subsNode = v
		default:
			return nil, errf(k, "unknown key %q (%s)", k.Value, strings.Join(specKeys, ", "))
		}
		if err != nil {
			return nil, errf(v, "%s: %v", k.Value, err)
		}
	}
	for o, s := range common {
		if _, ok := sp.opts[o]; !ok {
			sp.opts[o] = s
		}
	}
	for o, s := range commonOpts {
		if _, ok := sp.opts[o]; !ok {
			sp.opts[o] = s
		}
	}
	if subsNode != nil {
		if subsNode.Kind != yaml.MappingNode {
			return nil, errf(subsNode, "subcommands: a mapping of names to specs")
		}
		sp.subs = map[string]*argSpec{}
		inherit := commonOpts
		for i := 0; i+1 < len(subsNode.Content); i += 2 {
			k, v := subsNode.Content[i], subsNode.Content[i+1]
			sub, err := parseSpec(file, name+" "+strings.Fields(k.Value)[0], v, inherit, sp)
			if err != nil {
				return nil, err
			}
			for _, s := range strings.Fields(k.Value) {
				if _, dup := sp.subs[s]; dup {
					return nil, errf(k, "subcommand %q twice", s)
				}
				sp.subs[s] = sub
			}
		}
	}
	for o := range sp.opts {
		if strings.HasPrefix(o, "--") || sp.single {
			sp.longs = append(sp.longs, o)
		}
	}
	sort.Strings(sp.longs)
	canon := func(list []string, what string) error {
		for _, f := range list {
			if sp.opts[f] == nil {
				return errf(n, "%s names %s, which is not one of its options", what, f)
			}
		}
		return nil
	}
	if err := canon(sp.recursive, "recursive"); err != nil {
		return nil, err
	}
	if err := canon(sp.inPlace, "in_place"); err != nil {
		return nil, err
	}
	if err := canon(sp.content, "content"); err != nil {
		return nil, err
	}
	if err := canon(sp.noContent, "no_content"); err != nil {
		return nil, err
	}
	if err := canon(sp.wtFlags, "worktree"); err != nil {
		return nil, err
	}
	if sp.modules != nil && (sp.opts["-m"] == nil || sp.opts["-m"].role != roleValue) {
		return nil, errf(n, "modules: needs a -m option with a value")
	}
	if err := canon(sp.endsOpts, "ends_options"); err != nil {
		return nil, err
	}
	if err := canon(sp.hidden, "hidden"); err != nil {
		return nil, err
	}
	if sp.walk != nil && sp.subs == nil {
		if err := canon(sp.walk.follow, "walk: follow"); err != nil {
			return nil, err
		}
	}
	for _, r := range sp.operands {
		if err := canon(r.ifAny, "operands if:"); err != nil {
			return nil, err
		}
	}
	if sp.wrap != nil {
		if sp.subs != nil || sp.handler != "" || sp.values {
			return nil, errf(wrapNode, "a wrapper has no subcommands, handler or values style")
		}
		if err := canon(sp.wrap.cwdUnknown, "wrapper: cwd_unknown"); err != nil {
			return nil, err
		}
		if err := canon(sp.wrap.cwdUnless, "wrapper: cwd_unless"); err != nil {
			return nil, err
		}
	}
	return sp, nil
}

// parseOptions reads "NAMES: ROLE" entries; a wrapper's roles are
// wrapperRoles.
func parseOptions(v *yaml.Node, m map[string]*optSpec, wrapper bool, errf func(*yaml.Node, string, ...any) error) error {
	if v.Kind != yaml.MappingNode {
		return errf(v, "options: a mapping of \"-x --long\" to a role")
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, r := v.Content[i], v.Content[i+1]
		rs := r.Value
		optional := strings.HasSuffix(rs, "?")
		rs = strings.TrimSuffix(rs, "?")
		ro, ok := roleNames[rs]
		if !ok || ro == roleUnknown || ro == roleExec {
			return errf(r, "unknown option role %q", r.Value)
		}
		if optional && (ro == roleFlag || ro == roleArgs) {
			return errf(r, "a flag has no value to be optional")
		}
		if wrapper && !slices.Contains(wrapperRoles, ro) {
			return errf(r, "a wrapper's option is a flag, value, read, write, chdir, script, split or opaque, not %s", rs)
		}
		if !wrapper && ro == roleSplit {
			return errf(r, "split is the role of a wrapper's option")
		}
		names := strings.Fields(k.Value)
		if len(names) == 0 {
			return errf(k, "an option needs a name")
		}
		for _, nm := range names {
			// A lone - may be an option (env -, su -).
			if !strings.HasPrefix(nm, "-") || nm == "--" {
				return errf(k, "option %q does not start with -", nm)
			}
			if _, dup := m[nm]; dup {
				return errf(k, "option %s twice", nm)
			}
			// Each name is its own option: a key lists options that
			// share a role, and if:, recursive: and the like name every
			// spelling they mean.
			m[nm] = &optSpec{name: nm, role: ro, optional: optional}
		}
	}
	return nil
}

// parseOperands reads operands: a list of roles, or a list of
// {if: [flags], roles: [...]} alternatives (the first that applies wins;
// one without if: applies always).
func parseOperands(v *yaml.Node, wrapper bool, errf func(*yaml.Node, string, ...any) error) ([]operandRule, error) {
	if v.Kind != yaml.SequenceNode {
		return nil, errf(v, "operands: a list of roles or of {if:, roles:}")
	}
	if len(v.Content) == 0 || v.Content[0].Kind == yaml.ScalarNode {
		r, err := parseRoles(v, wrapper, errf)
		if err != nil {
			return nil, err
		}
		return []operandRule{r}, nil
	}
	var out []operandRule
	for _, alt := range v.Content {
		var r operandRule
		var ifAny []string
		var roles *yaml.Node
		for i := 0; i+1 < len(alt.Content); i += 2 {
			switch alt.Content[i].Value {
			case "if":
				if err := alt.Content[i+1].Decode(&ifAny); err != nil {
					return nil, errf(alt.Content[i+1], "if: a list of options")
				}
			case "roles":
				roles = alt.Content[i+1]
			default:
				return nil, errf(alt.Content[i], "unknown key %q (if, roles)", alt.Content[i].Value)
			}
		}
		if roles == nil {
			return nil, errf(alt, "an operands alternative needs roles:")
		}
		r, err := parseRoles(roles, wrapper, errf)
		if err != nil {
			return nil, err
		}
		r.ifAny = ifAny
		out = append(out, r)
	}
	return out, nil
}

// parseRoles reads a list of operand roles. A wrapper's are value, read or
// write before its payload, exec..., last.
func parseRoles(v *yaml.Node, wrapper bool, errf func(*yaml.Node, string, ...any) error) (operandRule, error) {
	var r operandRule
	if v.Kind != yaml.SequenceNode {
		return r, errf(v, "roles: a list")
	}
	for _, n := range v.Content {
		s, rep := strings.CutSuffix(n.Value, "...")
		ro, ok := roleNames[s]
		if !ok || ro == roleFlag || ro == roleUnknown {
			return r, errf(n, "unknown operand role %q", n.Value)
		}
		before := ro == roleValue || ro == roleRead || ro == roleWrite
		switch {
		case wrapper && (r.repeat || !before && !(ro == roleExec && rep)):
			return r, errf(n, "a wrapper's operands are value, read or write, then its payload: exec..., last")
		case rep && r.repeat:
			return r, errf(n, "only one role may repeat (...)")
		case rep:
			r.rest, r.repeat = ro, true
		case r.repeat:
			r.suffix = append(r.suffix, ro)
		default:
			r.prefix = append(r.prefix, ro)
		}
	}
	return r, nil
}

// lookup finds option name (for a single-style spec without its dashes
// normalised) in sp: exactly, or as an unambiguous prefix of a long one.
func (sp *argSpec) lookup(name string) *optSpec {
	if o := sp.opts[name]; o != nil {
		return o
	}
	if sp.single && strings.HasPrefix(name, "--") {
		if o := sp.opts[name[1:]]; o != nil {
			return o
		}
	}
	if !sp.abbrev || !strings.HasPrefix(name, "--") || len(name) < 4 && !(sp.getopt && len(name) == 3) {
		return nil
	}
	i := sort.SearchStrings(sp.longs, name)
	var found *optSpec
	for ; i < len(sp.longs) && strings.HasPrefix(sp.longs[i], name); i++ {
		o := sp.opts[sp.longs[i]]
		if found != nil && found != o {
			return nil // ambiguous
		}
		found = o
	}
	return found
}

// attached finds, for a gcc-style word -Xvalue, the longest option that
// takes a value and that the word starts with; it returns the option and
// the length of its name.
func (sp *argSpec) attached(word string) (*optSpec, int) {
	var best *optSpec
	n := 0
	for name, o := range sp.opts {
		if o.role == roleFlag || o.role == roleArgs || len(name) <= n || len(name) >= len(word) || !strings.HasPrefix(word, name) {
			continue
		}
		best, n = o, len(name)
	}
	return best, n
}

// roles returns the roles of n operands given the flags.
func (sp *argSpec) operandRoles(n int, flags flagSet) (roles []role, extra bool) {
	var r *operandRule
	for i := range sp.operands {
		if len(sp.operands[i].ifAny) == 0 || flags.any(sp.operands[i].ifAny...) {
			r = &sp.operands[i]
			break
		}
	}
	roles = make([]role, n)
	if r == nil {
		return roles, n > 0 // no operands expected
	}
	defer func() {
		if flags.any(sp.inPlace...) {
			for i, ro := range roles {
				if ro == roleRead {
					roles[i] = roleWrite
				}
			}
		}
	}()
	p, s := len(r.prefix), len(r.suffix)
	for i := range roles {
		switch {
		case i < p:
			roles[i] = r.prefix[i]
		case i >= n-s && i-(n-s) < s:
			roles[i] = r.suffix[i-(n-s)]
		case r.repeat:
			roles[i] = r.rest
		default:
			extra = true // roleUnknown
		}
	}
	return roles, extra
}

// isRecursive reports whether reads are recursive given the flags.
func (sp *argSpec) isRecursive(flags flagSet) bool {
	return sp.recAlways || flags.any(sp.recursive...)
}

// showsContent reports whether the command prints the content of the
// files it shows from the repository (spec key content).
func (sp *argSpec) showsContent(flags flagSet) bool {
	if sp.content == nil {
		return false
	}
	return flags.any(sp.content...) || sp.contentDefault && !flags.any(sp.noContent...)
}

// readsHidden reports whether a recursive read includes dotfiles.
func (sp *argSpec) readsHidden(flags flagSet) bool {
	return !sp.hideDots || flags.any(sp.hidden...)
}

// flagSet holds the options a command line gave, by canonical name; a
// handful, so a slice.
type flagSet []string

func (f flagSet) any(names ...string) bool {
	for _, n := range names {
		if slices.Contains(f, n) {
			return true
		}
	}
	return false
}

// wrapSpec is a spec's wrapper: key: the program runs a command given as
// its operands, the operand of role exec and every later one (its payload,
// read as a command of its own: argv.go). Transparent wrappers only make a
// decision stricter; a primary one needs an allow of its own.
type wrapSpec struct {
	primary bool // it changes who or where the payload runs (sudo, chroot)
	assigns bool // NAME=VALUE words before the payload are its environment (env, sudo)
	// chdir: an option may move the payload's directory, so one the spec
	// does not list makes it unknown.
	chdir bool
	// cwdAlways, cwdUnknown, cwdUnless: the payload's directory is known
	// only at run time: always (chroot), with one of cwdUnknown (sudo -i),
	// without one of cwdUnless (systemd-run's service).
	cwdAlways             bool
	cwdUnknown, cwdUnless []string
	note                  string // the payload gets an opaque item saying this (xargs)
	alone                 string // without a payload: unknown, values (env prints) or shell (su)
	script                bool   // the payload's words, joined by blanks, are shell code (watch)
	stdinWords            bool   // the payload gets words read from stdin: files a producer lists (xargs)
}

// wrapperKeys are the keys of a spec's wrapper:.
var wrapperKeys = []string{"primary", "assigns", "chdir", "cwd_unknown", "cwd_unless", "note", "alone", "payload", "stdin_words"}

// wrapperRoles are the roles a wrapper's options may have: the wrapper
// itself reads and writes files, moves its payload (chdir), runs a script
// instead of it or words before it (split); nothing else of it is read.
var wrapperRoles = []role{roleFlag, roleValue, roleRead, roleWrite, roleChdir, roleScript, roleSplit, roleOpaque}

// parseWrapper reads a spec's wrapper: mapping.
func parseWrapper(v *yaml.Node, errf func(*yaml.Node, string, ...any) error) (*wrapSpec, error) {
	if v.Kind != yaml.MappingNode {
		return nil, errf(v, "wrapper: a mapping of %s", strings.Join(wrapperKeys, ", "))
	}
	w := &wrapSpec{alone: "unknown"}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], v.Content[i+1]
		var err error
		switch k.Value {
		case "primary":
			err = val.Decode(&w.primary)
		case "assigns":
			err = val.Decode(&w.assigns)
		case "chdir":
			err = val.Decode(&w.chdir)
		case "cwd_unknown":
			if val.Kind == yaml.ScalarNode && val.Value == "always" {
				w.cwdAlways = true
			} else {
				err = val.Decode(&w.cwdUnknown)
			}
		case "cwd_unless":
			err = val.Decode(&w.cwdUnless)
		case "note":
			err = val.Decode(&w.note)
		case "alone":
			if w.alone = val.Value; !slices.Contains([]string{"unknown", "values", "shell"}, w.alone) {
				err = fmt.Errorf("unknown, values or shell, not %q", val.Value)
			}
		case "payload":
			if !slices.Contains([]string{"argv", "script"}, val.Value) {
				err = fmt.Errorf("argv or script, not %q", val.Value)
			}
			w.script = val.Value == "script"
		case "stdin_words":
			err = val.Decode(&w.stdinWords)
		default:
			return nil, errf(k, "wrapper: unknown key %q (%s)", k.Value, strings.Join(wrapperKeys, ", "))
		}
		if err != nil {
			return nil, errf(val, "wrapper: %s: %v", k.Value, err)
		}
	}
	return w, nil
}
