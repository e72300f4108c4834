// Package extract reads an agent's request (session/request_permission,
// fs/*, terminal/create, mcp/message) into the evidence the policy decides
// (package policy): Extract turns a Request into Evidence, a list of
// items (paths with their forms, commands with their argv, domains, tool
// names), each with the ACP kinds of what it does, or opaque, unknown or
// refused when the router cannot see through it. It knows no rule: what
// an item is does not depend on the policy in force. What needs the
// filesystem (symlinks, which arguments name existing files, shell globs,
// what is below a directory) comes in through the FS the caller provides;
// MapFS is an in-memory one for tests and `acp-router policy test`.
//
// The programs it knows are data: specs/*.yaml (spec.go loads them,
// specs/README.md says how to write one).
//
// Closed-world allow (issue 14): ordinary programs are read with their
// argument spec, data in specs/*.yaml (spec.go loads it, programs.go reads
// a command line with it, operands.go records each role). An option the
// spec does not list, an operand it has no role for, a program without a
// spec, a variable set for the command whose effect is unknown, or a sed
// or awk script the lexer cannot follow make the arguments not understood
// (Item.Unknown): an allow rule covers such an item only with arguments:
// any or a literal command pattern (no wildcard) that matches it; else
// it asks (policy.RuleUnknownArguments). A program without a spec that such a
// rule allows has its path-like arguments (and each piece of one a
// program may split: KEY=PATH, a comma list, HOST:CONTAINER, @FILE) read
// by shape: deny and ask rules see each read and written, and for the
// allow rules each is then a read (the core's vouchedShape, issue 27): the rule
// vouches for what the program does with them, not for where they are.
// A command pattern or program: entry whose program has a / (./x,
// tools/x, /abs/x, ~/bin/x, ${roots}/x) names the file the shell runs
// (matchProgram): a relative one is below ${cwd}, and it matches the
// program joined to the command's directory, cleaned and with its
// symlinks resolved (every form for an allow: not ./tools/../x, not a
// symlink out of tools/, never a program found on PATH).
// Commands a program runs on the side
// (git -c core.pager, --upload-pack, go -toolexec, GIT_SSH_COMMAND,
// PAGER) are analysed as commands of their own and make the program not
// understood unless they only pass data through (cat, less); variables
// that change which code runs or where programs read their configuration
// are opaque, proxies name hosts. find -exec's {} and xargs fed by find
// DIR or git ls-files stand for any file below those directories.
// A git command that prints the content of the files it shows from the
// repository's objects (log -p, show, diff, archive, format-patch, grep,
// stash show -p, status -v: the spec's content) names no file when a
// revision or nothing limits it: it reads the top of the work tree (the
// working directory for grep and archive) recursively, as git add -A
// does, so a secret-matching file in the work tree asks. What history
// holds beyond the work tree the router cannot see.
// Likewise a git command that replaces work-tree files from another
// revision (checkout or switch to one, pull, merge, stash pop,
// cherry-pick, reset --hard: the spec's worktree) writes the top of the
// work tree and everything below it but .git, so a deny or ask rule on a
// hooks directory (.husky, which core.hooksPath may name) or a secret
// there applies.
//
// A write to a file by which a tool runs what the file names (configs.go:
// git's configuration and hooks below .git, a submodule's or a linked
// worktree's included; .cargo/config.toml, rust-toolchain.toml, .npmrc,
// .yarnrc.yml, pip.conf), or to a directory written with its tree in which
// one can be (.cargo, .git/hooks), is opaque: the program the tool will
// run, in this command line or a later request, is in the file's content.
// The project's code (Makefile, package.json, build.rs, go.mod) is not
// such a file.
// What a command installs in the user's home is a path it writes there:
// go install writes GOBIN (by default ~/go/bin), cargo install without
// --root ~/.cargo/bin, both on the user's PATH.
//
// Items the router cannot see through (eval, source, a variable or command
// substitution as a program or an argument, a shell that reads its script
// from a pipe, a parse error, ...) are opaque: no allow rule ever covers
// them, so they are at least ask; deny and ask rules still apply to
// whatever was extracted around them. So is shell arithmetic ($((x)),
// ((...)), let, subscripts, [[ A -eq B ]], test -v and printf -v NAME[SUB])
// over a value the router does not know to be a number: bash evaluates a
// variable's value or a command's output as an expression, and an array
// subscript in it runs its command substitutions (arith.go); printf -v
// NAME assigns NAME as NAME=VALUE does.
//
// Shell state set earlier on a line (state.go, issue 27): a variable that
// export, declare/typeset/local/readonly, a bare VAR=x, read, mapfile,
// printf -v, getopts, wait -p, ${VAR:=x}, an arithmetic assignment or a
// for loop sets is set for every later command of the same shell, as its
// VAR=x prefix would be (env rules, Item.Env; a value the router does not
// understand makes those commands Unknown); a subshell, a pipeline's part,
// a command substitution and a background command keep what they set. A
// nameref, declare -i over a non-number, mapfile -C, hash -p, set -f, -k,
// +B or -o posix, shopt of globbing, aliases or lastpipe, and a name known
// only at run time are opaque; set and shopt with harmless options, hash
// without -p and unset need no rule. Function bodies are analysed where
// they are written.
//
// Globs (glob.go): a command is judged by its argv after bash's
// expansion of its unquoted globs against the files that exist (no
// dotfiles unless the pattern says ., sorted, unmatched left as written,
// an unquoted loop variable's names split at blanks), so a file named like
// one of the program's options is that option; a glob the router cannot
// expand, a name starting with - that the line writes where one of its
// globs lists, and file names xargs would split or read as options are
// not understood. terminal/create's command and args that hold shell
// syntax or blanks are also read as the one line an editor joining them
// for its shell would run.
//
// Working directories: relative paths are resolved against every
// directory a command may run in. Followed: cd, pushd and popd however
// spelled (quoted, escaped, after builtin or command -p, with -L -P -e -@
// or --), ~ and $HOME targets, cd in subshells, groups and nested shell
// scripts (order-free: each cd may apply before any command), a
// directory run as a command (autocd), env -C, sudo -D, unshare and
// nsenter -w, systemd-run --working-directory, the terminal/create cwd
// and rawInput's cwd, workdir, working_directory, directory (and dir_path
// beside a command; a relative one is relative to the session's cwd).
// A cd through a symlink gives the logical and the physical directory.
// Not auto-allowable (the directory is known only at run time): a target
// computed at run time, cd -, ~user, ~+N, a glob, cd OLD NEW, pushd and
// popd +N/-N, an option cd does not have, a relative cd in a loop or
// function, assigning PWD, OLDPWD, DIRSTACK or CDPATH, turning on autocd,
// a login (sudo -i, su -, runuser -l), a new root (chroot, sudo -R,
// nsenter -r/-m, unshare -R), systemd-run outside --scope/--same-dir. A
// wrapper's options are closed-world: one it does not have makes the
// wrapper Unknown and, if the wrapper can move its payload, the
// payload's directory unknown. Deny and ask rules still see the paths
// resolved against the directories that are known.
//
// Every limit fails closed (issue 14): past a soft bound (256 pieces of
// evidence, 12 levels of nested scripts and wrappers, 64 words of a brace
// expansion) a request is too large to allow, so it gets an opaque item
// naming the bound, but extraction goes on so that deny and ask rules see
// every piece; past a hard bound (16384 pieces, 64 levels) the request is
// refused. A NUL byte in a path or an argument makes its item opaque; a
// path is matched up to its first NUL, as the system would read it.
// Params read differently by encoding/json (which matches member names
// case-insensitively) and by the editor (exact names) are refused: two
// members that name one field ("path" and "PATH", at any depth:
// acp.AmbiguousMember), or one member of the fs, terminal, toolCall,
// location or content objects the policy decodes spelled otherwise than
// its field ("CWD", "Kind": acp.FoldedMember).
//
// The stricter reading wins (issue 14): a permission request's declared
// kind never narrows what its title or rawInput show. A rawInput that
// carries what a tool writes (content, new_string, edits, a patch, ...)
// or where it moves to (destination, ...) and a title starting with a
// verb such as Write or Delete add their kinds to every item of the tool
// call; a rawInput command is decided as the command; locations are
// always evidence. Beyond the fields it knows by name, every field of
// rawInput and of the tool call's _meta, at any depth, is read by the
// shape of its key and value (rawScan): a key naming a path (…path,
// …file, …dir, target, to, include, …) or a URL (…url, …uri) is one, a
// command key (cmd, argv, script, …) is decided as a command, a patch
// (patchText, Codex's input, a diff) writes every file it names, and an
// unknown key whose value is an absolute path or a file: URL is that
// path. A tool's path with $HOME, a file: URL or ~ is also matched as
// the tool may expand it; ~user or another variable is opaque.
package extract
