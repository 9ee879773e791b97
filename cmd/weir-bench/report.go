package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// row is one target of one scenario: the medians of its measurements.
type row struct {
	Scenario, Target string
	Load             string // how it was loaded, when the scenario's description does not say
	Reps             int
	PostsPerS        float64
	MiBPerS          float64
	WireMiBPerS      float64
	P50, P99, P999   float64 // ms
	Errors           int64   // over all measurements
	RSS              int64   // peak resident memory of the server (the proxy for target proxy)
	RSS2             int64   // the main service behind the proxy
	SrvCores         float64 // CPU used by the server(s) per second of the measurement
	LoadCores        float64 // CPU used by weir-load per second
	OtherCores       float64 // CPU used by everything else on the machine per second
	E2E, Lag         float64 // proxy
	Lost             int64   // proxy, over all measurements
	Ratio            string
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianRow(samples []sample) row {
	r := row{Reps: len(samples)}
	field := func(f func(sample) float64) float64 {
		v := make([]float64, len(samples))
		for i, s := range samples {
			v[i] = f(s)
		}
		return median(v)
	}
	r.PostsPerS = field(func(s sample) float64 { return s.PostsPerS })
	r.MiBPerS = field(func(s sample) float64 { return s.MiBPerS })
	r.WireMiBPerS = field(func(s sample) float64 { return s.WireMiBPerS })
	r.P50 = field(func(s sample) float64 { return s.P50 })
	r.P99 = field(func(s sample) float64 { return s.P99 })
	r.P999 = field(func(s sample) float64 { return s.P999 })
	r.SrvCores = field(func(s sample) float64 { return s.SrvCores })
	r.LoadCores = field(func(s sample) float64 { return s.LoadCores })
	r.OtherCores = field(func(s sample) float64 { return s.OtherCores })
	r.E2E = field(func(s sample) float64 { return s.E2E })
	r.Lag = field(func(s sample) float64 { return s.Lag })
	for _, s := range samples {
		r.Errors += s.Errors
		r.Lost += s.Lost
	}
	return r
}

// goal is one of the benchmark issue's targets, checked against this run.
type goal struct {
	Scenario, What, Measured, Threshold string
	Met                                 bool
}

type report struct {
	Date, Args string
	Machine    machine
	Options    *options
	Runtime    time.Duration
	LoadAvgEnd string
	Rows       []row
	Goals      []goal
}

func (r *report) find(scen, target string) *row {
	for i := range r.Rows {
		if r.Rows[i].Scenario == scen && r.Rows[i].Target == target {
			return &r.Rows[i]
		}
	}
	return nil
}

// bySize: scenarios compared by throughput (MiB/s) rather than posts/s.
var bySize = map[string]bool{"1g": true, "1g-gzip": true, "10x100m": true}

// evaluate fills in the ratios and checks the goals.
func (r *report) evaluate() {
	r.Goals = nil
	add := func(scen, what, measured, threshold string, met bool) {
		r.Goals = append(r.Goals, goal{scen, what, measured, threshold, met})
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	for _, scen := range scenarioNames() {
		metric := func(x *row) float64 { return x.PostsPerS }
		unit := "posts/s"
		if bySize[scen] {
			metric, unit = func(x *row) float64 { return x.MiBPerS }, "MiB/s"
		}
		drain, naive, weir := r.find(scen, tDrain), r.find(scen, tNaive), r.find(scen, tWeir)
		if naive != nil && drain != nil {
			naive.Ratio = fmt.Sprintf("%.2f× drain", ratio(metric(naive), metric(drain)))
		}
		group := r.find(scen, tGroup)
		if group != nil && naive != nil && drain != nil {
			group.Ratio = fmt.Sprintf("%.2f× naive, %.2f× drain", ratio(metric(group), metric(naive)), ratio(metric(group), metric(drain)))
		}
		if tx := r.find(scen, tWeirTx); tx != nil && naive != nil && weir != nil {
			tx.Ratio = fmt.Sprintf("%.2f× naive; weir (log) is %.2f× this", ratio(metric(tx), metric(naive)), ratio(metric(weir), metric(tx)))
		}
		if weir != nil && naive != nil && drain != nil {
			wn, wd := ratio(metric(weir), metric(naive)), ratio(metric(weir), metric(drain))
			weir.Ratio = fmt.Sprintf("%.2f× naive, %.2f× drain", wn, wd)
			if group != nil {
				weir.Ratio += fmt.Sprintf(", %.2f× group", ratio(metric(weir), metric(group)))
			}
			switch scen {
			case "1k":
				add(scen, "weir / naive, "+unit, fmt.Sprintf("%.2f", wn), "≥ 2", wn >= 2)
			case "45k", "45k-gzip":
				add(scen, "weir / naive, "+unit, fmt.Sprintf("%.2f", wn), "≥ 2", wn >= 2)
				add(scen, "weir / drain, "+unit, fmt.Sprintf("%.2f", wd), "≥ 0.25", wd >= 0.25)
			case "1g", "1g-gzip":
				add(scen, "weir / naive, "+unit, fmt.Sprintf("%.2f", wn), "≥ 0.70", wn >= 0.7)
			}
		}
		if weir != nil && (scen == "1g" || scen == "1g-gzip") {
			mib := float64(weir.RSS) / (1 << 20)
			add(scen, "weir peak RSS", fmt.Sprintf("%.1f MiB", mib), "< 100 MiB", weir.RSS > 0 && mib < 100)
		}
		for _, t := range []string{tProxy, tProxyDeflate} {
			px := r.find(scen, t)
			if px == nil || weir == nil {
				continue
			}
			e := ratio(px.E2E, weir.PostsPerS)
			px.Ratio = fmt.Sprintf("end to end %.1f posts/s = %.2f× direct; last post arrived %.1fs after sending ended; lost %d",
				px.E2E, e, px.Lag, px.Lost)
			add(scen, t+" end to end / direct, posts/s", fmt.Sprintf("%.2f", e), "≥ 0.50", e >= 0.5)
			add(scen, "posts lost through "+t, fmt.Sprint(px.Lost), "0", px.Lost == 0)
		}
		if scen == "rate" && weir != nil {
			weir.Ratio = weir.Load
			m := fmt.Sprintf("%.2f ms", weir.P99)
			if weir.Errors > 0 {
				m += fmt.Sprintf(" (and %d posts refused)", weir.Errors)
			}
			add(scen, "weir p99 latency at half the peak rate", m, "< 20 ms", weir.P99 < 20 && weir.PostsPerS > 0 && weir.Errors == 0)
		}
	}
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func mib(b int64) string {
	if b == 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

// table renders a markdown table with padded columns, readable as text too.
func table(head []string, rows [][]string) string {
	w := make([]int, len(head))
	for i, h := range head {
		w[i] = len([]rune(h))
	}
	for _, r := range rows {
		for i, c := range r {
			w[i] = max(w[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for i, c := range cells {
			b.WriteString(" " + c + strings.Repeat(" ", w[i]-len([]rune(c))) + " |")
		}
		b.WriteString("\n")
	}
	line(head)
	sep := make([]string, len(head))
	for i := range sep {
		sep[i] = strings.Repeat("-", w[i])
	}
	line(sep)
	for _, r := range rows {
		line(r)
	}
	return b.String()
}

func (r *report) markdown() string {
	var b strings.Builder
	o := r.Options
	fmt.Fprintf(&b, "### weir benchmark, %s\n\n", r.Date)
	fmt.Fprintf(&b, "`%s`: %d repetition(s) of each measurement, medians; the whole run took %s.\n\n", r.Args, o.reps, r.Runtime)
	b.WriteString("Machine:\n\n")
	for _, l := range r.Machine.lines() {
		b.WriteString("- " + l + "\n")
	}
	fmt.Fprintf(&b, "- load average at the end: %s\n\n", r.LoadAvgEnd)
	b.WriteString("Scenarios:\n\n")
	for _, s := range scenarios() {
		if len(o.scenarios) > 0 && !slices.Contains(o.scenarios, s.name) {
			continue
		}
		fmt.Fprintf(&b, "- `%s`: %s\n", s.name, s.describe(o))
	}
	if o.transaction {
		b.WriteString("\nTarget `weir-tx` (-transaction) is `weir serve` with `store.commit: transaction`: each post answered only after " +
			"its rows' transaction, as before the log-structured commit; `weir` is the default, `store.commit: log`.\n")
	}
	if o.ceiling {
		b.WriteString("\nTarget `group` (-ceiling) is `weir-baseline -mode group`: every post appended to one file, " +
			"answered after an fdatasync that began after it was written, posts that arrive during a flush sharing the next one. " +
			"No compression, no index, no receipt that names the bytes: the ceiling of any durable server on this disk with these senders, " +
			"not a target weir is measured against.\n")
	}
	b.WriteString("\n")
	var rows [][]string
	for _, x := range r.Rows {
		rss := mib(x.RSS)
		if x.RSS2 > 0 {
			rss += " + main " + mib(x.RSS2)
		}
		rows = append(rows, []string{
			x.Scenario, x.Target, num(x.PostsPerS), num(x.MiBPerS), num(x.P50), num(x.P99), num(x.P999),
			fmt.Sprint(x.Errors), rss, num(x.SrvCores), num(x.LoadCores), num(x.OtherCores), x.Ratio,
		})
	}
	b.WriteString(table([]string{"scenario", "target", "posts/s", "MiB/s", "p50 ms", "p99 ms", "p99.9 ms", "errors",
		"peak RSS", "server CPU", "load CPU", "other CPU", "ratio"}, rows))
	b.WriteString("\nposts/s and MiB/s count posts answered 200 and their uncompressed bytes; latency is per post " +
		"(in `rate`, from its scheduled send time); CPU is in cores (CPU seconds per second) used by the server, " +
		"by weir-load and by everything else on the machine (noise) during the measurement; " +
		"for `proxy`, posts/s is the rate the proxy acknowledged, and CPU is counted until the last post arrived, " +
		"server CPU being the proxy's and the main service's together.\n\n")
	if len(r.Goals) > 0 {
		b.WriteString("Targets (informative, never a pass/fail test):\n\n")
		var g [][]string
		for _, x := range r.Goals {
			met := "no"
			if x.Met {
				met = "yes"
			}
			g = append(g, []string{x.Scenario, x.What, x.Measured, x.Threshold, met})
		}
		b.WriteString(table([]string{"scenario", "measure", "measured", "target", "met"}, g))
	}
	return b.String()
}
