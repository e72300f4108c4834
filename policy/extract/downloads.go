package extract

import (
	"path"
	"slices"
	"strconv"
	"strings"
)

// curlGlobOutputs records the files curl -o writes for a URL glob: with
// {a,b} in the URL (without -g) curl fetches each URL, and an -o name's #N
// is the Nth set's choice for that URL ('curl -o "#1" ".../{.npmrc,y}"'
// writes .npmrc and y, curl 7.88, checked). A glob curlGlob cannot expand
// (a [N-M] range, too many URLs) with an -o that names #N: the names are
// not known, and the command asks.
func (x *extractor) curlGlobOutputs(p *parsedArgs, cwds []string) {
	if path.Base(p.label) != "curl" || p.flags.any("-g", "--globoff") {
		return
	}
	var tmpls []string
	for _, v := range p.vals {
		if (v.opt.name == "-o" || v.opt.name == "--output") && v.has && v.v.opaque == "" && strings.Contains(v.v.s, "#") {
			tmpls = append(tmpls, v.v.s)
		}
	}
	if len(tmpls) == 0 {
		return
	}
	urls := slices.Clone(p.ops)
	for _, v := range p.vals {
		if v.opt.name == "--url" && v.has {
			urls = append(urls, v.v)
		}
	}
	for _, u := range urls {
		if u.opaque != "" || !strings.ContainsAny(u.s, "{[") {
			continue
		}
		insts, alts := curlGlob(u.s, maxBraces)
		if insts == nil {
			x.opaque(p.label, "curl -o names its files after a URL glob the router does not expand", KindEdit)
			continue
		}
		for _, t := range tmpls {
			for _, combo := range alts {
				x.path(curlOutputName(t, combo), false, KindEdit, false, "curl -o #N of a URL glob", cwds)
			}
		}
	}
}

// curlGlob expands curl's URL globbing: each {a,b} set (no nesting, \
// escapes) gives one URL per alternative; alts holds each URL's choices,
// for -o's #1, #2. A [N-M] range, an unclosed set or more than limit URLs:
// nil. An IPv6 address in brackets right after "//" is not a range.
func curlGlob(s string, limit int) (urls []string, alts [][]string) {
	type part struct {
		lit  string
		alts []string
	}
	var parts []part
	var lit strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			lit.WriteByte(s[i])
		case c == '[':
			if j := strings.Index(s, "://"); j >= 0 && i == j+3 || i > 0 && s[i-1] == '@' {
				k := strings.IndexByte(s[i:], ']')
				if k < 0 {
					return nil, nil
				}
				lit.WriteString(s[i : i+k+1]) // [::1]: an address
				i += k
				continue
			}
			return nil, nil // a range
		case c == '{':
			k := strings.IndexByte(s[i:], '}')
			if k < 0 {
				return nil, nil
			}
			parts = append(parts, part{lit: lit.String()})
			lit.Reset()
			parts = append(parts, part{alts: strings.Split(s[i+1:i+k], ",")})
			i += k
		default:
			lit.WriteByte(c)
		}
	}
	parts = append(parts, part{lit: lit.String()})
	urls, alts = []string{""}, [][]string{nil}
	for _, p := range parts {
		if p.alts == nil {
			for i := range urls {
				urls[i] += p.lit
			}
			continue
		}
		if len(urls)*len(p.alts) > limit {
			return nil, nil
		}
		var nu []string
		var na [][]string
		for i, u := range urls {
			for _, a := range p.alts {
				nu = append(nu, u+a)
				na = append(na, append(slices.Clip(alts[i]), a))
			}
		}
		urls, alts = nu, na
	}
	return urls, alts
}

// curlOutputName replaces -o's #N with the Nth choice of a URL glob.
func curlOutputName(tmpl string, combo []string) string {
	var b strings.Builder
	for i := 0; i < len(tmpl); i++ {
		if tmpl[i] == '#' && i+1 < len(tmpl) && '1' <= tmpl[i+1] && tmpl[i+1] <= '9' {
			j := i + 1
			for j < len(tmpl) && '0' <= tmpl[j] && tmpl[j] <= '9' {
				j++
			}
			if n, err := strconv.Atoi(tmpl[i+1 : j]); err == nil && n <= len(combo) {
				b.WriteString(combo[n-1])
				i = j - 1
				continue
			}
		}
		b.WriteByte(tmpl[i])
	}
	return b.String()
}
