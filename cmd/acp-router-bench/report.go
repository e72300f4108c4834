package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// row is one line of the results table.
type row struct {
	sc, fig, label string
	// target, when set, is the target for the router (the first
	// variant's column): its text, and whether the medians meet it (nil:
	// cannot tell).
	target func(m medians) (string, *bool)
}

// medians gives a figure's median over rounds for a path.
type medians func(path string) (float64, bool)

func (b *bench) rows() []row {
	var rows []row
	agents := map[string]string{"go": "Go agent", "ts": "TS SDK dual-version-agent.js"}
	for _, a := range []string{"go", "ts"} {
		for _, n := range []int{1, 16} {
			sc := fmt.Sprintf("prompt/%s/%d", a, n)
			what := fmt.Sprintf("%s, %d session", agents[a], n)
			if n > 1 {
				what += "s"
			}
			var rate, p50, p99 func(medians) (string, *bool)
			if n == 1 {
				rate = ratioTarget("relay", 0.9, "byte relay")
				p50 = addedTarget(60)
				p99 = addedTarget(300)
			} else {
				rate = ratioTarget("direct", 0.85, "direct")
			}
			rows = append(rows,
				row{sc, "prompts/s", what + ": prompts/s", rate},
				row{sc, "p50", what + ": prompt p50 (µs)", p50},
				row{sc, "p99", what + ": prompt p99 (µs)", p99},
				row{sc, "cpu", what + ": proxy CPU per prompt (µs)", nil},
				row{sc, "switches", what + ": proxy context switches per prompt", nil})
		}
	}
	for _, f := range floodSizes {
		sc := "flood/" + f.name
		label := "relay of " + f.label + " updates"
		var ups, mbs func(medians) (string, *bool)
		switch f.name {
		case "200B":
			ups = floorTarget(100000, "updates/s")
		case "1MiB":
			mbs = floorTarget(500, "MB/s")
		}
		rows = append(rows,
			row{sc, "updates/s", label + ": updates/s", ups},
			row{sc, "MB/s", label + ": MB/s", mbs},
			row{sc, "cpu", label + ": proxy CPU per update (µs)", nil},
			row{sc, "switches", label + ": proxy context switches per update", nil})
	}
	pace := fmt.Sprintf("update latency at %s/s", thousands(float64(b.o.rate)))
	rows = append(rows,
		row{"latency", "p50", pace + ": p50 (µs)", nil},
		row{"latency", "p99", pace + ": p99 (µs)", addedTarget(1000)},
		row{"latency", "max", pace + ": max (µs)", nil})
	rows = append(rows,
		row{"memory", "idle", "RSS idle, 1 session (MB)", maxTarget(50, "MB")},
		row{"memory", "sessions", fmt.Sprintf("RSS with %s sessions (MB)", thousands(float64(b.o.memSessions))), nil},
		row{"memory", "per-session", "RSS per idle session (KB)", maxTarget(20, "KB")},
		row{"memory", "one-x", "peak RSS above idle, one 1 MiB update (× message)", func(m medians) (string, *bool) {
			v, ok := m("router")
			return "a small multiple (< 10×)", verdict(ok, v < 10)
		}},
		row{"memory", "flood-peak", "peak RSS (VmHWM), 1 MiB flood (MB)", nil},
		row{"memory", "flood-x", "peak RSS above idle, 1 MiB flood (× message)", nil})
	replay := fmt.Sprintf("session/load replay of %s updates", thousands(float64(b.o.replay)))
	rows = append(rows,
		row{"replay", "updates/s", replay + ": updates/s", nil},
		row{"replay", "seconds", replay + ": seconds", nil})
	return rows
}

func verdict(ok, met bool) *bool {
	if !ok {
		return nil
	}
	return &met
}

// ratioTarget: router ≥ k × the base path.
func ratioTarget(base string, k float64, name string) func(medians) (string, *bool) {
	return func(m medians) (string, *bool) {
		r, ok1 := m("router")
		v, ok2 := m(base)
		text := fmt.Sprintf("≥ %.2g× %s", k, name)
		if ok1 && ok2 {
			text += fmt.Sprintf(" (%.2f×)", r/v)
		}
		return text, verdict(ok1 && ok2, r >= k*v)
	}
}

// addedTarget: router − direct ≤ limit µs.
func addedTarget(limit float64) func(medians) (string, *bool) {
	return func(m medians) (string, *bool) {
		r, ok1 := m("router")
		d, ok2 := m("direct")
		text := fmt.Sprintf("added ≤ %s µs", thousands(limit))
		if ok1 && ok2 {
			text += fmt.Sprintf(" (%+.0f µs", r-d)
			if rel, ok := m("relay"); ok {
				text += fmt.Sprintf("; byte relay %+.0f", rel-d)
			}
			text += ")"
		}
		return text, verdict(ok1 && ok2, r-d <= limit)
	}
}

// floorTarget: router ≥ floor, or ≥ 0.8 × the byte relay when the byte
// relay itself does not reach floor.
func floorTarget(floor float64, unit string) func(medians) (string, *bool) {
	return func(m medians) (string, *bool) {
		r, ok1 := m("router")
		rel, ok2 := m("relay")
		text := fmt.Sprintf("≥ %s %s, or ≥ 0.8× byte relay if it is slower", thousands(floor), unit)
		if !ok1 {
			return text, nil
		}
		return text, verdict(true, r >= floor || (ok2 && rel < floor && r >= 0.8*rel))
	}
}

// maxTarget: router ≤ limit.
func maxTarget(limit float64, unit string) func(medians) (string, *bool) {
	return func(m medians) (string, *bool) {
		r, ok := m("router")
		return fmt.Sprintf("≤ %s %s", thousands(limit), unit), verdict(ok, r <= limit)
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// report prints the header, the table and the notes, as Markdown.
func (b *bench) report(w io.Writer, took time.Duration) {
	fmt.Fprintf(w, "\n## acp-router benchmark\n\n")
	for _, m := range b.e.machine {
		fmt.Fprintf(w, "- %s\n", m)
	}
	fmt.Fprintf(w, "- other load: the machine was %.0f%% busy in the second before the run (0%% = only this benchmark)\n", 100*b.busy)
	build := "built from the working tree at " + b.e.commit
	if b.e.build != "" {
		build += " (" + b.e.build + ")"
	}
	fmt.Fprintf(w, "- router: %s; the client, the agent and the proxy share the machine's cores\n", build)
	fmt.Fprintf(w, "- %d rounds, paths interleaved (order rotating each round), medians over rounds; prompt trials %s; MB = 10^6 bytes; run took %s\n",
		b.o.rounds, b.o.trial, took.Round(time.Second))
	for _, v := range b.o.variants {
		fmt.Fprintf(w, "- column %q: acp-router with %s\n", pathName(v), variantsByName[v].about)
	}
	fmt.Fprintln(w)

	header := []string{"figure"}
	for _, p := range b.paths {
		if p == "relay" {
			p = "byte relay"
		}
		header = append(header, p)
	}
	var routers []string
	for _, p := range b.paths {
		if strings.HasPrefix(p, "router") {
			routers = append(routers, p)
			header = append(header, p+"/direct", p+"/relay")
		}
	}
	header = append(header, "target (issue 6)", "")
	table := [][]string{header}
	for _, r := range b.rows() {
		if b.o.only != nil && !b.o.only.MatchString(r.sc) {
			continue
		}
		figs := b.res[r.sc][r.fig]
		m := func(path string) (float64, bool) {
			v := figs[path]
			if len(v) == 0 {
				return 0, false
			}
			return median(v), true
		}
		line := []string{r.label}
		for _, p := range b.paths {
			line = append(line, b.cell(r.sc, r.fig, p, m))
		}
		for _, p := range routers {
			rv, ok := m(p)
			for _, base := range []string{"direct", "relay"} {
				bv, okb := m(base)
				// The relay's per-session memory is noise around zero.
				if ok && okb && bv > 0 && rv > 0 && r.fig != "per-session" {
					line = append(line, fmt.Sprintf("%.2f", rv/bv))
				} else {
					line = append(line, "")
				}
			}
		}
		if r.target != nil {
			// Targets judge the first variant's column.
			text, met := r.target(func(path string) (float64, bool) {
				if path == "router" {
					path = pathName(b.o.variants[0])
				}
				return m(path)
			})
			res := "n/a"
			if met != nil {
				res = map[bool]string{true: "met", false: "**missed**"}[*met]
			}
			line = append(line, text, res)
		} else {
			line = append(line, "", "")
		}
		table = append(table, line)
	}
	writeTable(w, table)

	var notes []string
	for _, sc := range sortedKeys(b.errs) {
		for _, p := range sortedKeys(b.errs[sc]) {
			who := p
			if who == "" {
				who = "all paths"
			}
			notes = append(notes, fmt.Sprintf("- %s, %s: %s", sc, who, b.errs[sc][p]))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nNot measured:\n%s\n", strings.Join(notes, "\n"))
	}
}

// cell is a path's median, or why it has none.
func (b *bench) cell(sc, fig, path string, m medians) string {
	if v, ok := m(path); ok {
		return format(v)
	}
	if why, ok := b.errs[sc][path]; ok {
		if strings.HasPrefix(why, "not supported") {
			return "not supported by this router build"
		}
		if strings.HasPrefix(why, "not applicable") {
			return "n/a (below)"
		}
		return "error (below)"
	}
	if why, ok := b.errs[sc][""]; ok && strings.HasPrefix(why, "skipped") {
		return "skipped"
	}
	if path == "direct" && (sc == "memory" || fig == "cpu" || fig == "switches") {
		return "—"
	}
	return ""
}

func format(v float64) string {
	a := math.Abs(v)
	switch {
	case a < 0.005:
		return "0.00"
	case a >= 1000:
		return thousands(v)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// thousands formats v rounded, with separators: 123,456.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", math.Abs(v))
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if v < 0 {
		return "-" + string(out)
	}
	return string(out)
}

// writeTable prints rows as an aligned Markdown table.
func writeTable(w io.Writer, rows [][]string) {
	width := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for n, r := range rows {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range r {
			pad := width[i] - len([]rune(c))
			if i > 0 && i < len(r)-2 && n > 0 { // numbers right-aligned
				b.WriteString(" " + strings.Repeat(" ", pad) + c + " |")
			} else {
				b.WriteString(" " + c + strings.Repeat(" ", pad) + " |")
			}
		}
		fmt.Fprintln(w, b.String())
		if n == 0 {
			b.Reset()
			b.WriteString("|")
			for i := range r {
				if i > 0 && i < len(r)-2 {
					b.WriteString(strings.Repeat("-", width[i]+1) + ":|")
				} else {
					b.WriteString(strings.Repeat("-", width[i]+2) + "|")
				}
			}
			fmt.Fprintln(w, b.String())
		}
	}
}
