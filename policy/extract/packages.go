package extract

import (
	"fmt"
	"regexp"
	"strings"
)

// Package names as the package managers read them. A name is not always a
// name in a registry: npm takes user/repo as a GitHub repository and
// github:, gitlab:, bitbucket:, gist:, git+ssh:// or a tarball URL as
// places to fetch from; pip takes "name @ URL" and a local directory or
// archive, whose build runs its setup.py. Each reaches a host, which the
// domain rules must see, or runs code from a place the rules judge: a
// local directory or archive is read (its install scripts and setup.py
// are code read from there, as python FILE is). A package built from a
// git repository runs its prepare and install scripts, one from a URL its
// install scripts (npm, unless --ignore-scripts) or its build backend
// or its .pth files (pip): code from the network that no registry served.
// It is opaque: nothing the router can read says what it does, and a
// rule allowing the package manager, or the host, is not a rule allowing
// the code of every repository on the host.

// isPackageRole reports whether r names packages to fetch.
func isPackageRole(r role) bool {
	return r == roleNpmPackage || r == rolePipRequirement || r == roleGoModule || r == roleGitSource
}

// packageArg records an argument naming a package; it reports whether it
// recorded a path.
func (x *extractor) packageArg(p *parsedArgs, opt string, a arg, r role, cwds []string) bool {
	origin := "argument of " + p.label
	if opt != "" {
		origin = p.label + " " + opt
	}
	if a.opaque != "" {
		x.opaque(origin, fmt.Sprintf("%s installs a package named %s: where it comes from is not known", p.label, a.opaque), KindExecute)
		return false
	}
	if a.s == "" {
		return false
	}
	switch r {
	case roleNpmPackage:
		return x.npmPackage(p, origin, a, cwds, 0)
	case rolePipRequirement:
		return x.pipRequirement(p, origin, a, cwds)
	case roleGoModule:
		return x.goModule(p, origin, a, cwds)
	case roleGitSource:
		// cargo install --git URL builds the crate there: its build
		// scripts and procedural macros run.
		if m := scpLike.FindStringSubmatch(a.s); m != nil && !strings.Contains(a.s, "://") {
			x.host(m[1], origin)
		} else {
			x.url(a.s, origin)
		}
		x.opaque(origin, fmt.Sprintf("%s builds the code of the repository %s: its build scripts run", p.label, a.s), KindExecute)
	}
	return false
}

// npmHosted are npm's host shorthands (hosted-git-info): the hosts a
// package named by one is fetched from (the repository, and the host
// that serves its tarballs).
var npmHosted = map[string][]string{
	"github":    {"github.com", "codeload.github.com"},
	"gist":      {"gist.github.com", "codeload.github.com"},
	"gitlab":    {"gitlab.com"},
	"bitbucket": {"bitbucket.org"},
}

// npmName is a package name in the registry, scoped or not: what npm
// reads as a registry package, with an optional @VERSION, @TAG or @RANGE.
// (Old packages have capitals: JSONStream.)
// A name does not start with a dot (. and .. are directories).
var npmName = regexp.MustCompile(`^(@[A-Za-z0-9~-][A-Za-z0-9._~-]*/)?[A-Za-z0-9~-][A-Za-z0-9._~-]*$`)

// npmTarball is a file name npm reads as a local tarball.
var npmTarball = regexp.MustCompile(`(?i)\.(tgz|tar\.gz|tar)$`)

// npmPackage reads an npm package spec (npm-package-arg): a registry name
// is a plain value; NAME@SPEC reads SPEC when it is not a version, tag or
// range (an alias npm:OTHER, a URL, a repository, a file).
func (x *extractor) npmPackage(p *parsedArgs, origin string, a arg, cwds []string, depth int) bool {
	s := a.s
	scripts := !p.flags.any("--ignore-scripts")
	if depth > 4 {
		x.opaque(origin, fmt.Sprintf("%s: the package alias %q nests too deep", p.label, s), KindExecute)
		return false
	}
	// A scoped or plain name, then @SPEC.
	if _, spec, ok := strings.Cut(strings.TrimPrefix(s, "@"), "@"); ok && npmName.MatchString(s[:len(s)-len(spec)-1]) {
		if strings.HasPrefix(spec, "npm:") {
			return x.npmPackage(p, origin, arg{s: spec[len("npm:"):]}, cwds, depth+1)
		}
		if npmVersionSpec(spec) {
			return false
		}
		s = spec
	}
	if rest, ok := strings.CutPrefix(s, "npm:"); ok {
		return x.npmPackage(p, origin, arg{s: rest}, cwds, depth+1)
	}
	if strings.HasPrefix(s, "jsr:") {
		// JSR's packages, through its npm compatibility registry.
		x.host("npm.jsr.io", origin)
		return false
	}
	if npmName.MatchString(s) {
		return false // a registry package
	}
	if scheme, rest, ok := strings.Cut(s, ":"); ok && npmHosted[scheme] != nil && !strings.HasPrefix(rest, "//") {
		for _, h := range npmHosted[scheme] {
			x.host(h, origin)
		}
		x.gitPackage(p, origin, s)
		return false
	}
	if f, ok := strings.CutPrefix(s, "file:"); ok {
		return x.localPackage(p, arg{s: strings.TrimPrefix(f, "//"), glob: a.glob}, cwds)
	}
	if strings.Contains(s, "://") && schemeURL.MatchString(s) {
		scheme, _, _ := strings.Cut(s, "://")
		scheme = strings.ToLower(scheme)
		if scheme == "git+file" {
			x.gitPackage(p, origin, s)
			return x.localPackage(p, arg{s: strings.TrimPrefix(s, "git+file://")}, cwds)
		}
		x.url(s, origin) // git+ssh://git@host/...: the host, whatever the scheme
		if strings.HasPrefix(scheme, "git") {
			x.gitPackage(p, origin, s)
		} else if scripts {
			x.opaque(origin, fmt.Sprintf("%s runs the install scripts of the package at %s, which no registry served", p.label, s), KindExecute)
		}
		return false
	}
	if m := scpLike.FindStringSubmatch(s); m != nil {
		// git@github.com:user/repo.git
		x.host(m[1], origin)
		x.gitPackage(p, origin, s)
		return false
	}
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~/") || npmTarball.MatchString(s) {
		return x.localPackage(p, arg{s: s, glob: a.glob}, cwds) // s: NAME@../dir is ../dir
	}
	if strings.Contains(s, "/") {
		// user/repo[#ref]: a GitHub repository.
		for _, h := range npmHosted["github"] {
			x.host(h, origin)
		}
		x.gitPackage(p, origin, s)
		return false
	}
	// Not a name npm accepts (capitals, spaces): it refuses it, or reads
	// it some way the router does not.
	x.markUnknown(fmt.Sprintf("%s: %q is not a package name the router can read", p.label, s))
	return false
}

// npmVersionSpec reports whether the part after NAME@ is a version, a
// dist-tag or a semver range (registry), not a place.
func npmVersionSpec(spec string) bool {
	if spec == "" {
		return true
	}
	if strings.Contains(spec, ":") || strings.Contains(spec, "/") || npmTarball.MatchString(spec) {
		return false
	}
	for _, c := range spec {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune(".-+_^~<>=*| ", c)) {
			return false
		}
	}
	return true
}

// gitPackage records the code a package built from a git repository runs
// at install: npm installs its dependencies and runs its prepare script
// before packing it, --ignore-scripts or not (pacote's git fetcher).
func (x *extractor) gitPackage(p *parsedArgs, origin, s string) {
	x.opaque(origin, fmt.Sprintf("%s builds the package %s from a git repository: its prepare and install scripts run", p.label, s), KindExecute)
}

// localPackage records a package installed from a directory or an
// archive: the directory or archive is read (npm links a directory and
// reads its package.json, pip builds it with its backend). Its install
// scripts or setup.py run from there: code read from that place, as
// python FILE runs code read from FILE, which the path rules judge; what
// that code reads in turn is no more known than what FILE's is.
func (x *extractor) localPackage(p *parsedArgs, a arg, cwds []string) bool {
	return x.argPath(p.label, a, KindRead, false, true, cwds)
}

// pipArchive is a file name pip reads as a package archive; a requirement
// is also a path when it has a path separator, starts with a dot or names
// an existing file.
var pipArchive = regexp.MustCompile(`(?i)\.(whl|tar\.gz|tgz|tar\.bz2|tbz|tar\.xz|txz|tar|zip)$`)

// pipRequirement reads a pip requirement (PEP 508, and pip's URLs and
// paths): NAME[extras] @ URL is a direct reference to URL; it and a URL
// (git+https://, an archive) name their host, and install code no index
// served (a source tree's setup.py runs at once, a wheel's .pth files at
// the next start of python): opaque. A path or an archive here is read,
// as python FILE reads FILE.
func (x *extractor) pipRequirement(p *parsedArgs, origin string, a arg, cwds []string) bool {
	s := strings.TrimSpace(a.s)
	// Environment markers (; python_version < "3.9") say when, not where.
	if i := strings.IndexByte(s, ';'); i >= 0 && !strings.Contains(s[:i], "://") {
		s = strings.TrimSpace(s[:i])
	}
	if name, ref, ok := strings.Cut(s, "@"); ok && pipName.MatchString(strings.TrimSpace(name)) && !strings.Contains(name, "://") {
		ref = strings.TrimSpace(ref)
		if i := strings.Index(ref, " ;"); i >= 0 {
			ref = ref[:i]
		}
		s = ref
	} else if pipName.MatchString(s) || pipVersioned.MatchString(s) {
		return false // a name in the index, with a version specifier
	}
	if strings.Contains(s, "://") && schemeURL.MatchString(s) {
		scheme, _, _ := strings.Cut(strings.ToLower(s), "://")
		if scheme == "file" || strings.HasSuffix(scheme, "+file") {
			local, _, _ := strings.Cut(s[strings.Index(s, "://")+3:], "#")
			return x.localPackage(p, arg{s: local}, cwds)
		}
		x.url(s, origin) // git+https://host/...: the host, whatever the scheme
		x.opaque(origin, fmt.Sprintf("%s installs the package at %s, which no index served: its build (setup.py) runs, and a wheel's .pth files run at every start of python", p.label, s), KindExecute)
		return false
	}
	if m := scpLike.FindStringSubmatch(strings.TrimPrefix(s, "git+")); m != nil && strings.HasPrefix(s, "git+") {
		x.host(m[1], origin)
		x.opaque(origin, fmt.Sprintf("%s builds the package from %s: its setup.py or build backend runs", p.label, s), KindExecute)
		return false
	}
	if strings.ContainsAny(s, "/\\") || strings.HasPrefix(s, ".") || pipArchive.MatchString(s) || x.exists(s, cwds) {
		s, _, _ = strings.Cut(s, "#")
		s, _, _ = strings.Cut(s, "[") // ./dir[extra]
		return x.localPackage(p, arg{s: s, glob: a.glob}, cwds)
	}
	x.markUnknown(fmt.Sprintf("%s: %q is not a requirement the router can read", p.label, a.s))
	return false
}

// pipName is a project name with optional extras; pipVersioned the same
// with a version specifier (pkg==1.0, pkg>=2,<3, pkg~=1.4).
var (
	pipName      = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._, -]*\])?$`)
	pipVersioned = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._, -]*\])?\s*(\(?\s*(===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*,?\s*)+\)?$`)
)

// goModule reads an operand of go get, go install or go mod download: a
// local package (./cmd/x, a path) is a directory read; a module path
// (host/path[@version]) is fetched through the default GOPROXY, the Go
// module mirror (proxy.golang.org, checked against sum.golang.org): the
// hosts the command connects to. A GOPROXY, GOPRIVATE, GONOSUMDB or
// GOFLAGS set on the command line is not understood already (shell.go).
func (x *extractor) goModule(p *parsedArgs, origin string, a arg, cwds []string) bool {
	s := a.s
	mod, version, versioned := strings.Cut(s, "@")
	first, _, _ := strings.Cut(mod, "/")
	local := strings.HasPrefix(s, ".") || strings.HasPrefix(s, "/") || !strings.Contains(first, ".")
	if local || !versioned && strings.HasSuffix(p.label, " install") {
		// go install PKG without @: a package of the main module (or
		// std, or a pattern such as all), built from what is here; go
		// get ./...: the requirements of the packages there.
		if strings.HasSuffix(p.label, " install") && (strings.HasPrefix(s, ".") || strings.HasPrefix(s, "/")) {
			return x.argPath(p.label, dirOfPattern(a), KindRead, true, false, cwds)
		}
		return false
	}
	if strings.ContainsAny(version, "/:") {
		x.markUnknown(fmt.Sprintf("%s: %q is not a module version the router can read", p.label, s))
	}
	x.host("proxy.golang.org", origin)
	x.host("sum.golang.org", origin)
	return false
}
