package page

import (
	"embed"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/acp-router/acp-router/remote"
)

//go:embed assets
var assets embed.FS

// CSP is the Content-Security-Policy of every response: the page loads
// and connects to nothing but the router, runs no inline script or
// style, and cannot be framed.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'none'; object-src 'none'"

// Options configure the page.
type Options struct {
	// AuditFile is the router's audit log (config audit.file); "" leaves
	// the decisions view empty.
	AuditFile string
	// Now is the clock of the per-rule counts; nil is time.Now.
	Now func() time.Time
	// RuleAt says where a rule is (file:line:col) in the policy in
	// force, "" for a rule it no longer has; nil: nowhere.
	RuleAt func(id string) string
}

// Handler serves the page, its assets and its JSON endpoints. remote/
// calls it only for authenticated requests, with the Identity in the
// request's context.
type Handler struct {
	opts  Options
	audit *AuditReader
}

// New returns the page's handler.
func New(opts Options) *Handler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Handler{opts: opts, audit: NewAuditReader(opts.AuditFile)}
}

// headers are every response's: the CSP and what keeps a browser from
// guessing types, sending the URL (and its token) elsewhere, or caching.
func headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
}

var files = map[string]struct{ name, ctype string }{
	"/":             {"assets/index.html", "text/html; charset=utf-8"},
	"/page/app.js":  {"assets/app.js", "text/javascript; charset=utf-8"},
	"/page/app.css": {"assets/app.css", "text/css; charset=utf-8"},
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	headers(w)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case "/api/audit":
		h.serveAudit(w, r)
		return
	case "/api/me":
		me(w, r)
		return
	}
	f, ok := files[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	b, err := assets.ReadFile(f.name)
	if err != nil {
		http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", f.ctype)
	w.Write(b)
}

// SignIn is the answer to a request without a valid token: a static page
// with no script that says only that, 401 (a bare 401 off the page).
func SignIn(w http.ResponseWriter, r *http.Request) {
	headers(w)
	if r.URL.Path != "/" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	b, _ := assets.ReadFile("assets/signin.html")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	w.Write(b)
}

func (h *Handler) serveAudit(w http.ResponseWriter, r *http.Request) {
	id, ok := remote.IdentityOf(r.Context())
	if !ok || !id.AllSessions {
		// The audit names every agent's sessions: only a token that may
		// see them all reads it.
		http.Error(w, "this token may not read the audit (it sees only its own sessions)", http.StatusForbidden)
		return
	}
	q := r.URL.Query()
	f := Filter{Agent: q.Get("agent"), Session: q.Get("session"), Rule: q.Get("rule"), Effect: q.Get("effect")}
	if v := q.Get("before"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			http.Error(w, "before: want a cursor from an earlier answer", http.StatusBadRequest)
			return
		}
		f.Before = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			http.Error(w, "limit: want a positive number", http.StatusBadRequest)
			return
		}
		f.Limit = n
	}
	res, err := h.audit.Read(f, h.opts.Now())
	if err != nil {
		http.Error(w, "cannot read the audit log", http.StatusInternalServerError)
		return
	}
	if h.opts.RuleAt != nil {
		for id := range res.Counts {
			if at := h.opts.RuleAt(id); id != "" && at != "" {
				res.Where[id] = at
			}
		}
		for _, e := range res.Entries {
			var r struct {
				Rule string `json:"rule"`
			}
			json.Unmarshal(e.Record, &r)
			if at := h.opts.RuleAt(r.Rule); r.Rule != "" && at != "" {
				res.Where[r.Rule] = at
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(res)
}

// me answers /api/me: who the page's token is and the most it may be, so
// that the page does not offer "Take control" to a token the hub would
// refuse it to (an observer's attach as controller fails). The role is
// the hub's reading of Identity.Role: anything but observer controls.
func me(w http.ResponseWriter, r *http.Request) {
	id, _ := remote.IdentityOf(r.Context())
	role := "controller"
	if id.Role == "observer" {
		role = "observer"
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(struct {
		Name        string `json:"name"`
		Role        string `json:"role"`
		AllSessions bool   `json:"allSessions"`
	}{id.Name, role, id.AllSessions})
}

// isPage: the paths the page owns (remote/ sends the rest to /acp's
// handler or 404).
func isPage(path string) bool {
	_, ok := files[path]
	return ok || strings.HasPrefix(path, "/api/")
}

// Owns says whether path is the page's.
func (h *Handler) Owns(path string) bool { return isPage(path) }
