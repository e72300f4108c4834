package token

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// maxSecretLen bounds what is hashed: a real secret is 48 bytes.
const maxSecretLen = 256

// compareDigest compares two digests in time independent of where they
// differ (a test pins that it is subtle's).
var compareDigest = subtle.ConstantTimeCompare

// Authenticate says which token r carries, from, in this order, an
// "Authorization: Bearer" header, the CookieName cookie, or the QueryParam
// query parameter (meant for a first URL only: remote/ then sets the
// cookie). Every failure is an ErrUnauthorized the caller answers with 401
// and no detail. A wrong token holds its source address back for a delay
// that doubles with each further failure (Options.BaseDelay to MaxDelay);
// meanwhile that address's attempts fail unread (ErrHeldBack), so a guess
// costs its maker time. A request with no token at all is not a failure.
func (s *Store) Authenticate(r *http.Request) (Identity, error) {
	secret, ok := credential(r)
	if !ok {
		return Identity{}, ErrNoCredentials
	}
	addr := sourceKey(r.RemoteAddr)
	if !s.lim.allow(addr) {
		return Identity{}, ErrHeldBack
	}
	recs, err := s.current()
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	match := -1
	if len(secret) <= maxSecretLen {
		sum := sha256.Sum256([]byte(secret))
		// Every record is compared, the match or not, so that the time
		// taken says nothing about which digest was close.
		for i := range recs {
			if compareDigest(sum[:], recs[i].sum[:]) == 1 {
				match = i
			}
		}
	}
	if match < 0 {
		n, delay := s.lim.fail(addr)
		if n == warnAfter {
			s.log.Warn("repeated authentication failures", "addr", addr, "failures", n, "held_back", delay)
		} else {
			s.log.Debug("authentication failed", "addr", addr, "failures", n, "held_back", delay)
		}
		return Identity{}, fmt.Errorf("%w: unknown or revoked token", ErrUnauthorized)
	}
	s.lim.succeed(addr)
	rec := recs[match]
	s.touch(rec)
	return Identity{Name: rec.Name, Role: rec.Role, AllSessions: rec.AllSessions, ID: rec.id}, nil
}

// warnAfter: the failure that is logged at warn level once per address run
// (the others at debug), so that a flood does not flood the log.
const warnAfter = 5

// credential is the token r carries, if any.
func credential(r *http.Request) (string, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, v, _ := strings.Cut(h, " ")
		if strings.EqualFold(scheme, "Bearer") {
			if v = strings.TrimSpace(v); v != "" {
				return v, true
			}
		}
	}
	if c, err := r.Cookie(CookieName); err == nil && c.Value != "" {
		return c.Value, true
	}
	if r.URL != nil {
		if v := r.URL.Query().Get(QueryParam); v != "" {
			return v, true
		}
	}
	return "", false
}

// sourceKey is the address failures are counted against: the peer's IP
// (never a forwarded-for header, which the client writes), an IPv6 peer
// by its /64, since one host commonly holds a whole /64.
func sourceKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		if len(host) > 64 {
			host = host[:64]
		}
		return host
	}
	ip = ip.WithZone("").Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// touch records that rec was used, on disk at most every LastUsedEvery, and
// never waiting for another process's lock: a busy moment skips it.
func (s *Store) touch(rec record) {
	now := s.opts.Now()
	s.mu.Lock()
	last := rec.LastUsed
	if t := s.touched[rec.Name]; t.After(last) {
		last = t
	}
	if now.Sub(last) < s.opts.LastUsedEvery {
		s.mu.Unlock()
		return
	}
	s.touched[rec.Name] = now
	s.mu.Unlock()
	lock, err := s.lock(false)
	if err != nil {
		return
	}
	defer lock.Close()
	err = s.updateLocked(func(recs []record) ([]record, error) {
		for i := range recs {
			// The digest too: a token revoked and created again under
			// the same name meanwhile is another token.
			if recs[i].Name == rec.Name && recs[i].sum == rec.sum {
				recs[i].LastUsed = now.UTC().Truncate(time.Second)
				return recs, nil
			}
		}
		return nil, errNoChange
	})
	if err != nil {
		s.log.Warn("cannot record a token's last use", "token", rec.Name, "error", err)
	}
}
