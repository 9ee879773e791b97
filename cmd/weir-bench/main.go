// Command weir-bench is weir's benchmark harness: it builds weir, weir-load
// and weir-baseline, and for each scenario starts fresh server processes on
// loopback ports with temporary data directories — weir, and the baselines
// it is compared with in the same run (a net/http server that only drains
// the body, a naive server that writes each post to a new file and fsyncs
// it) — warms them up, runs the load generator against each target
// several times, interleaved, and prints a table of medians with ratios
// against the baselines and the targets of the benchmark issue beside
// them. It never fails because of a number: the exit code is 0 unless the
// harness itself fails.
//
//	go run ./cmd/weir-bench                 # everything, 3 repetitions (about 10 minutes)
//	go run ./cmd/weir-bench -quick          # a smoke run in about a minute
//	go run ./cmd/weir-bench -scenarios 45k,rate -reps 5 -out docs/bench.md
//
// See docs/performance.md.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "weir-bench:", err)
		os.Exit(1)
	}
}

// options are the harness's settings.
type options struct {
	quick     bool
	reps      int
	scenarios []string
	out       string
	binDir    string
	tmpDir    string
	keep      bool
	verbose   bool

	duration time.Duration // one closed-loop measurement
	rateDur  time.Duration // one fixed-rate measurement
	proxyDur time.Duration // one proxy measurement (sending)
	warmup   time.Duration
	conc     int  // closed-loop senders
	ceiling  bool // also measure tGroup in the closed-loop scenarios
	// transaction: also measure tWeirTx in the closed-loop scenarios
	transaction bool
	bigSize     int64 // the "1 GiB" post
	largeSize   int64 // each of the "10 x 100 MiB" posts
}

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("weir-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	var scen, big, large string
	fs.BoolVar(&o.quick, "quick", false, "a smoke run: short durations, small sizes (1 GiB -> 64 MiB, 100 MiB -> 16 MiB), 1 repetition")
	fs.IntVar(&o.reps, "reps", 3, "repetitions of each measurement (medians are reported); -quick: 1")
	fs.StringVar(&scen, "scenarios", "", "comma-separated scenarios to run (default all): "+strings.Join(scenarioNames(), ","))
	fs.StringVar(&o.out, "out", "", "also write the report as markdown to this file")
	fs.StringVar(&o.binDir, "bin", "", "use weir, weir-load and weir-baseline from this directory instead of building them")
	fs.StringVar(&o.tmpDir, "tmp", "", "directory for the servers' data (default: the system temp dir); its filesystem is what is measured")
	fs.BoolVar(&o.keep, "keep", false, "keep the data directories and logs")
	fs.BoolVar(&o.verbose, "v", false, "log every measurement")
	fs.DurationVar(&o.duration, "d", 10*time.Second, "length of one closed-loop measurement (-quick: 1s)")
	fs.DurationVar(&o.rateDur, "rate-d", 20*time.Second, "length of one fixed-rate measurement (-quick: 2s)")
	fs.DurationVar(&o.proxyDur, "proxy-d", 20*time.Second, "sending time of one proxy measurement (-quick: 2s)")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "warm-up of each server before its measurements (-quick: 300ms)")
	fs.IntVar(&o.conc, "c", 16, "concurrent senders in closed-loop scenarios")
	fs.BoolVar(&o.transaction, "transaction", false, "also measure weir with store.commit: transaction (each post answered after its rows' transaction) in the closed-loop scenarios")
	fs.BoolVar(&o.ceiling, "ceiling", false, "also measure weir-baseline -mode group (one file flushed once per batch of posts: the ceiling of a durable server on this disk) in the closed-loop scenarios")
	fs.StringVar(&big, "big", "1GiB", "size of the single big post (-quick: 64MiB)")
	fs.StringVar(&large, "large", "100MiB", "size of each of the 10 concurrent posts (-quick: 16MiB)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		quick := map[string]func(){
			"reps":    func() { o.reps = 1 },
			"d":       func() { o.duration = time.Second },
			"rate-d":  func() { o.rateDur = 2 * time.Second },
			"proxy-d": func() { o.proxyDur = 2 * time.Second },
			"warmup":  func() { o.warmup = 300 * time.Millisecond },
			"big":     func() { big = "64MiB" },
			"large":   func() { large = "16MiB" },
		}
		for name, f := range quick {
			if !set[name] {
				f()
			}
		}
	}
	var err error
	if o.bigSize, err = parseSize(big); err != nil {
		return nil, fmt.Errorf("-big: %w", err)
	}
	if o.largeSize, err = parseSize(large); err != nil {
		return nil, fmt.Errorf("-large: %w", err)
	}
	if o.reps < 1 || o.conc < 1 || o.duration <= 0 || o.rateDur <= 0 || o.proxyDur <= 0 || o.warmup < 0 {
		return nil, errors.New("-reps and -c must be positive, durations positive")
	}
	for _, s := range strings.Split(scen, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(scenarioNames(), s) {
			return nil, fmt.Errorf("-scenarios: unknown scenario %q (known: %s)", s, strings.Join(scenarioNames(), ", "))
		}
		o.scenarios = append(o.scenarios, s)
	}
	return o, nil
}

// parseSize reads a byte count with an optional binary unit (KiB, MiB,
// GiB; K, M, G).
func parseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = v, u.mult
			break
		}
	}
	var n int64
	if _, err := fmt.Sscan(strings.TrimSpace(t), &n); err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	return n * mult, nil
}

// harness is one run.
type harness struct {
	o      *options
	ctx    context.Context
	stderr io.Writer
	bins   string // directory of the three binaries
	tmp    string // this run's temp directory
	root   string // module root
	rep    *report
}

func (h *harness) bin(name string) string { return filepath.Join(h.bins, name) }

func (h *harness) logf(format string, a ...any) {
	fmt.Fprintf(h.stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
}

// run runs the harness and returns its report (also printed to stdout).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (*report, error) {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return nil, err
	}
	if runtime.GOOS != "linux" {
		return nil, errors.New("weir-bench reads /proc: it runs on Linux only")
	}
	h := &harness{o: o, ctx: ctx, stderr: stderr}
	h.root, err = moduleRoot()
	if err != nil && o.binDir == "" {
		return nil, err
	}
	h.tmp, err = os.MkdirTemp(o.tmpDir, "weir-bench-")
	if err != nil {
		return nil, err
	}
	if o.keep {
		h.logf("data and logs kept in %s", h.tmp)
	} else {
		defer os.RemoveAll(h.tmp)
	}
	started := time.Now()
	if o.binDir != "" {
		h.bins = o.binDir
	} else {
		h.bins = filepath.Join(h.tmp, "bin")
		if err := h.build(); err != nil {
			return nil, err
		}
	}
	h.rep = &report{
		Date:    started.UTC().Format("2006-01-02 15:04 UTC"),
		Args:    strings.Join(append([]string{"weir-bench"}, args...), " "),
		Machine: describeMachine(h.tmp, h.root),
		Options: o,
	}
	h.logf("machine: %s", strings.Join(h.rep.Machine.lines(), "; "))
	for _, s := range scenarios() {
		if len(o.scenarios) > 0 && !slices.Contains(o.scenarios, s.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		h.logf("scenario %s: %s", s.name, s.describe(o))
		t0 := time.Now()
		if err := s.run(h, s); err != nil {
			return nil, fmt.Errorf("scenario %s: %w", s.name, err)
		}
		h.logf("scenario %s done in %s", s.name, time.Since(t0).Round(time.Second))
	}
	h.rep.Runtime = time.Since(started).Round(time.Second)
	h.rep.LoadAvgEnd = loadAvg()
	h.rep.evaluate()
	md := h.rep.markdown()
	fmt.Fprint(stdout, md)
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(md), 0o644); err != nil {
			return h.rep, err
		}
	}
	return h.rep, nil
}

// goTool is the go command: $GOROOT/bin/go when set, else go on PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}

// moduleRoot is the directory of weir's go.mod, found by the go command
// from the working directory.
func moduleRoot() (string, error) {
	out, err := exec.Command(goTool(), "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run weir-bench inside the weir module (or give -bin)")
	}
	return filepath.Dir(mod), nil
}

func (h *harness) build() error {
	t0 := time.Now()
	for _, name := range []string{"weir", "weir-load", "weir-baseline"} {
		cmd := exec.CommandContext(h.ctx, goTool(), "build", "-o", h.bin(name), "./cmd/"+name)
		cmd.Dir = h.root
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/%s: %v\n%s", name, err, out.String())
		}
	}
	h.logf("built weir, weir-load and weir-baseline in %s", time.Since(t0).Round(100*time.Millisecond))
	return nil
}
