package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/acp-router/acp-router/token"
)

const (
	tokenCreateSynopsis = "acp-router token create [--config FILE] [--role controller|observer] [--own] NAME"
	tokenListSynopsis   = "acp-router token list [--config FILE]"
	tokenRevokeSynopsis = "acp-router token revoke [--config FILE] NAME"
	tokenUsage          = "usage:\n  " + tokenCreateSynopsis + "\n  " + tokenListSynopsis + "\n  " + tokenRevokeSynopsis +
		"\n\nacp-router token create --help (list, revoke) says more.\n"
)

var tokenCreateHelp = help{
	synopsis: tokenCreateSynopsis,
	about: `Creates a named bearer token for clients of a listening router (acp-router serve, listen:) and
prints its secret on stdout, once, and nothing else there: the router keeps only its SHA-256, in
the state directory's tokens/tokens.json (mode 0600). A client sends it as
"Authorization: Bearer SECRET", or opens the router's URL with ?token=SECRET once (the router then
sets a cookie). --role observer: the client may watch sessions, never answer or prompt. --own: it
sees only the sessions its own clients started. NAME (1-64 of A-Z a-z 0-9 . _ @ -; not "editor")
is what logs, the audit and answered_by: rules know it by. Exit 1 if NAME exists.`,
	example: `  acp-router token create phone
  acp-router token create colleague --role observer --own
  SECRET=$(acp-router token create ci)
`,
}

var tokenListHelp = help{
	synopsis: tokenListSynopsis,
	about: `Lists the tokens: name, role, which sessions they see, when they were created and last used
(recorded at most every 5 minutes). Never a secret or its digest.`,
	example: `  acp-router token list
`,
}

var tokenRevokeHelp = help{
	synopsis: tokenRevokeSynopsis,
	about: `Removes the token NAME. Every running router refuses it from its next request on, and within
a second ends the connections it opened: a WebSocket is closed 1008 "token revoked", an HTTP
connection's event streams end, acp-router connect exits 1; its clients leave their sessions as
any client that goes. A token created again under the same name is another token: it reaches
none of them. The stdio editor is never affected. Exit 1 if there is no such token.`,
	example: `  acp-router token revoke phone
`,
}

// tokenCmd is `acp-router token create|list|revoke`.
func tokenCmd(g *globals, args []string) (int, error) {
	if len(args) == 0 {
		return 2, errors.New(strings.TrimRight(tokenUsage, "\n"))
	}
	switch args[0] {
	case "create":
		return tokenCreate(g, args[1:])
	case "list":
		return tokenList(g, args[1:])
	case "revoke":
		return tokenRevoke(g, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Print(tokenUsage)
		return 0, nil
	}
	return 2, fmt.Errorf("unknown token command %q\n%s", args[0], tokenUsage)
}

// parseAll parses args with fs, flags before or after the operands
// ("token create NAME --role observer"), and returns the operands.
func parseAll(fs *flag.FlagSet, args []string) (operands []string, done bool, code int) {
	for {
		if done, code := parseFlags(fs, args); done {
			return nil, true, code
		}
		if fs.NArg() == 0 {
			return operands, false, 0
		}
		operands = append(operands, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// openTokens opens the token store of the config's state directory; the
// caller closes closer (the log file) when done with it.
func openTokens(g *globals) (s *token.Store, closer io.Closer, err error) {
	log, closer, err := newLogger(g)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := loadConfig(g)
	if err == nil {
		s, err = token.Open(cfg.StateDir, token.Options{Logger: log.Named("token")})
	}
	if err != nil {
		closer.Close()
		return nil, nil, err
	}
	return s, closer, nil
}

func tokenCreate(g *globals, args []string) (int, error) {
	fs := newFlags("token create", g, "warn", tokenCreateHelp)
	role := fs.String("role", token.RoleController, "controller (may prompt and answer permissions) or observer (may only watch)")
	own := fs.Bool("own", false, "see only the sessions this token's clients started (default: every session)")
	names, done, code := parseAll(fs, args)
	if done {
		return code, nil
	}
	if len(names) != 1 {
		return 2, errors.New("usage: " + tokenCreateSynopsis)
	}
	if err := token.CheckName(names[0]); err != nil {
		return 2, err
	}
	if *role != token.RoleController && *role != token.RoleObserver {
		return 2, fmt.Errorf("--role %q: controller or observer", *role)
	}
	s, closer, err := openTokens(g)
	if err != nil {
		return 1, err
	}
	defer closer.Close()
	secret, err := s.Create(names[0], *role, !*own)
	if err != nil {
		return 1, err
	}
	fmt.Println(secret)
	sees := "every session"
	if *own {
		sees = "only the sessions its clients start"
	}
	fmt.Fprintf(os.Stderr, "acp-router: token %q created (%s, %s). Its secret, above, is shown only this once:\n"+
		"the router keeps its SHA-256 only, in %s. Clients send it as \"Authorization: Bearer SECRET\"\n"+
		"or open the router's URL once with ?token=SECRET. Revoke it with: acp-router token revoke %s\n",
		names[0], *role, sees, s.Path(), names[0])
	return 0, nil
}

func tokenList(g *globals, args []string) (int, error) {
	fs := newFlags("token list", g, "warn", tokenListHelp)
	operands, done, code := parseAll(fs, args)
	if done {
		return code, nil
	}
	if len(operands) > 0 {
		return 2, errors.New("usage: " + tokenListSynopsis)
	}
	s, closer, err := openTokens(g)
	if err != nil {
		return 1, err
	}
	defer closer.Close()
	list, err := s.List()
	if err != nil {
		return 1, err
	}
	writeTokenList(os.Stdout, list, s.Path())
	return 0, nil
}

// writeTokenList is the table of `token list`, times in the local zone.
func writeTokenList(w io.Writer, list []token.Info, path string) {
	if len(list) == 0 {
		fmt.Fprintf(w, "no tokens in %s (acp-router token create NAME)\n", path)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tSESSIONS\tCREATED\tLAST USED")
	when := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.Local().Format("2006-01-02 15:04")
	}
	for _, t := range list {
		sees := "all"
		if !t.AllSessions {
			sees = "own"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.Role, sees, when(t.Created), when(t.LastUsed))
	}
	tw.Flush()
}

func tokenRevoke(g *globals, args []string) (int, error) {
	fs := newFlags("token revoke", g, "warn", tokenRevokeHelp)
	names, done, code := parseAll(fs, args)
	if done {
		return code, nil
	}
	if len(names) != 1 {
		return 2, errors.New("usage: " + tokenRevokeSynopsis)
	}
	s, closer, err := openTokens(g)
	if err != nil {
		return 1, err
	}
	defer closer.Close()
	if err := s.Revoke(names[0]); err != nil {
		return 1, err
	}
	fmt.Fprintf(os.Stderr, "acp-router: token %q revoked\n", names[0])
	return 0, nil
}
