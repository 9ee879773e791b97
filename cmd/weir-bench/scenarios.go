package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A scenario is one shape of load, measured against several targets.
type scenario struct {
	name     string
	describe func(o *options) string
	run      func(h *harness, s scenario) error
}

// Targets.
const (
	tDrain = "drain" // weir-baseline -mode drain
	tNaive = "naive" // weir-baseline -mode fsync
	// tGroup is weir-baseline -mode group, measured only with -ceiling: a
	// log flushed once per batch of posts, the most a durable server can
	// answer on this disk with this many senders.
	tGroup = "group"
	tWeir  = "weir" // weir serve
	// tWeirTx is weir serve with store.commit: transaction (every post
	// answered after its rows' transaction), measured only with
	// -transaction: what the log-structured commit of the default gives.
	tWeirTx = "weir-tx"
	tProxy  = "proxy" // sender -> weir proxy -> weir serve
	// tProxyDeflate is tProxy forwarding zips whose entries are deflated
	// at level 1 (zipCompression: standard), as it does to a downstream
	// that does not read S2 entries (the reference system).
	tProxyDeflate = "proxy-deflate"
)

func scenarios() []scenario {
	lines45 := func(extra ...string) func(o *options, d time.Duration) []string {
		return func(o *options, d time.Duration) []string {
			return append([]string{"-c", strconv.Itoa(o.conc), "-d", d.String(), "-lines", "999", "-chunked"}, extra...)
		}
	}
	std := []string{tDrain, tNaive, tWeir}
	return []scenario{
		{
			name: "1k",
			describe: func(o *options) string {
				return fmt.Sprintf("%d senders, closed loop, %s per measurement; posts of 1 KiB with Content-Length", o.conc, o.duration)
			},
			run: closedLoop(std, func(o *options, d time.Duration) []string {
				return []string{"-c", strconv.Itoa(o.conc), "-d", d.String(), "-size", "1KiB"}
			}),
		},
		{
			name: "45k",
			describe: func(o *options) string {
				return fmt.Sprintf("%d senders, closed loop, %s per measurement; posts of 999 short log lines (45.7 KiB), chunked (4 KiB chunks), Compression: NONE", o.conc, o.duration)
			},
			run: closedLoop(std, lines45()),
		},
		{
			name: "45k-gzip",
			describe: func(o *options) string {
				return "as 45k, gzipped, Compression: GZIP"
			},
			run: closedLoop(std, lines45("-gzip")),
		},
		{
			name: "1g",
			describe: func(o *options) string {
				return fmt.Sprintf("one post of %s of log text with Content-Length, Compression: NONE", sizeText(o.bigSize))
			},
			run: bigPosts(std, func(o *options) []string {
				return []string{"-c", "1", "-n", "1", "-size", strconv.FormatInt(o.bigSize, 10)}
			}, false),
		},
		{
			name: "1g-gzip",
			describe: func(o *options) string {
				return fmt.Sprintf("one post of %s of log text (uncompressed) gzipped, Compression: GZIP", sizeText(o.bigSize))
			},
			run: bigPosts(std, func(o *options) []string {
				return []string{"-c", "1", "-n", "1", "-size", strconv.FormatInt(o.bigSize, 10), "-gzip"}
			}, true),
		},
		{
			name: "10x100m",
			describe: func(o *options) string {
				return fmt.Sprintf("10 concurrent posts of %s each with Content-Length, Compression: NONE", sizeText(o.largeSize))
			},
			run: bigPosts(std, func(o *options) []string {
				return []string{"-c", "10", "-n", "10", "-size", strconv.FormatInt(o.largeSize, 10)}
			}, false),
		},
		{
			name: "proxy",
			describe: func(o *options) string {
				return fmt.Sprintf("45k posts (%d senders, %s) straight to weir serve, and to weir proxy (aggregation on, "+
					"aggregationFrequency 1s) forwarding to weir serve, with its defaults (proxy: S2 entries, which weir serve announces it reads) and with "+
					"zipCompression: standard (proxy-deflate: entries deflated at level 1, as to the reference system); proxy rate = posts / time until the main service has every one", o.conc, o.proxyDur)
			},
			run: runProxy,
		},
		{
			name: "rate",
			describe: func(o *options) string {
				return fmt.Sprintf("45k posts at a fixed rate of half weir's closed-loop peak (from scenario 45k), %s per measurement; "+
					"at most 64 in flight; latency from each post's scheduled time", o.rateDur)
			},
			run: runRate,
		},
	}
}

func scenarioNames() []string {
	var n []string
	for _, s := range scenarios() {
		n = append(n, s.name)
	}
	return n
}

func sizeText(n int64) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// loadSummary is what weir-load -json prints (the fields used here).
type loadSummary struct {
	PostsOK     int64          `json:"postsOk"`
	Errors      map[string]int `json:"errors"`
	ErrorsTotal int64          `json:"errorsTotal"`
	FirstError  string         `json:"firstError"`
	ElapsedS    float64        `json:"elapsedS"`
	PostsPerS   float64        `json:"postsPerS"`
	MiBPerS     float64        `json:"mibPerS"`
	WireMiBPerS float64        `json:"wireMibPerS"`
	PostBytes   int64          `json:"postBytes"`
	Latency     struct {
		P50, P99, P999, Max float64
	} `json:"latencyMs"`
	Late int64 `json:"late"`
}

// sample is one measurement of one target.
type sample struct {
	PostsPerS, MiBPerS, WireMiBPerS float64
	P50, P99, P999                  float64
	Errors                          int64
	SrvCores, LoadCores             float64
	OtherCores                      float64 // everything else on the machine
	PostsOK                         int64
	// proxy
	E2E  float64 // posts/s from the first send until the main service had every post
	Lag  float64 // seconds from the last answer to the last arrival
	Lost int64
}

// load runs weir-load against url with args and returns its summary, and
// the CPU it used per second of wall time.
func (h *harness) load(url string, args ...string) (*loadSummary, float64, error) {
	full := append([]string{"-url", url, "-json"}, args...)
	cmd := exec.CommandContext(h.ctx, h.bin("weir-load"), full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	runErr := cmd.Run()
	wall := time.Since(t0)
	var s loadSummary
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &s); err != nil {
		return nil, 0, fmt.Errorf("weir-load %s: %v (%v)\n%s%s", strings.Join(full, " "), runErr, err, stdout.String(), stderr.String())
	}
	cores := 0.0
	if ps := cmd.ProcessState; ps != nil && s.ElapsedS > 0 {
		cores = (ps.UserTime() + ps.SystemTime()).Seconds() / wall.Seconds()
	}
	if s.ErrorsTotal > 0 {
		h.logf("  weir-load: %d errors %v, first: %s", s.ErrorsTotal, s.Errors, s.FirstError)
	}
	return &s, cores, nil
}

// server is one target: its processes (the first is the one whose memory
// is reported) and where it takes posts.
type server struct {
	target   string
	url      string
	procs    []*proc
	dir      string // everything it stores, removed at the end
	naiveDir string // fsync baseline: its files, emptied after each measurement
	mainData string // proxy: the main service's data directory
}

func (s *server) cpu() time.Duration {
	var d time.Duration
	for _, p := range s.procs {
		d += p.cpuTime()
	}
	return d
}

func (s *server) stop() {
	for _, p := range s.procs {
		p.stop()
	}
}

func (h *harness) startTarget(scen, target string) (*server, error) {
	dir := filepath.Join(h.tmp, scen+"-"+target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s := &server{target: target, dir: dir}
	switch target {
	case tDrain, tNaive, tGroup:
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		mode := "drain"
		args := []string{"-listen", addr}
		switch target {
		case tNaive:
			mode = "fsync"
			s.naiveDir = filepath.Join(dir, "files")
			args = append(args, "-dir", s.naiveDir)
		case tGroup:
			// Its one file grows for as long as it runs: a closed-loop
			// scenario's measurements write a few GiB at most.
			mode = "group"
			args = append(args, "-dir", filepath.Join(dir, "log"))
		}
		p, err := startProc(target, filepath.Join(dir, "server.log"), h.bin("weir-baseline"), append([]string{"-mode", mode}, args...)...)
		if err != nil {
			return nil, err
		}
		s.procs = []*proc{p}
		s.url = "http://" + addr + "/datafeed"
		if err := p.waitTCP(addr, 30*time.Second); err != nil {
			s.stop()
			return nil, err
		}
	case tWeir, tWeirTx:
		extra := ""
		if target == tWeirTx {
			extra = "store:\n  commit: transaction\n"
		}
		p, url, err := h.startWeir(dir, target, "", extra)
		if err != nil {
			return nil, err
		}
		s.procs, s.url = []*proc{p}, url
	case tProxy, tProxyDeflate:
		zipCompression := "auto"
		if target == tProxyDeflate {
			zipCompression = "standard"
		}
		mainDir := filepath.Join(dir, "main")
		if err := os.MkdirAll(mainDir, 0o755); err != nil {
			return nil, err
		}
		mp, mainURL, err := h.startWeir(mainDir, "weir (behind the proxy)", "", "")
		if err != nil {
			return nil, err
		}
		s.mainData = filepath.Join(mainDir, "data")
		proxyDir := filepath.Join(dir, "proxy")
		if err := os.MkdirAll(proxyDir, 0o755); err != nil {
			mp.stop()
			return nil, err
		}
		pp, url, err := h.startWeir(proxyDir, "weir proxy", fmt.Sprintf(`proxyId: bench-proxy
aggregator:
  aggregationFrequency: 1s
forwardHttpDestinations:
  - name: main
    forwardUrl: %s
    zipCompression: %s
    queue:
      retryDelay: 1s
`, mainURL, zipCompression), "")
		if err != nil {
			mp.stop()
			return nil, err
		}
		s.procs, s.url = []*proc{pp, mp}, url
	default:
		return nil, fmt.Errorf("unknown target %q", target)
	}
	return s, nil
}

// startWeir starts `weir serve` (or `weir proxy` when proxyYAML is not
// empty) with data in dir/data, authentication off and every feed received,
// and extraYAML's settings.
func (h *harness) startWeir(dir, name, proxyYAML, extraYAML string) (*proc, string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	cfg := fmt.Sprintf(`listen: %s
data: %s
receive:
  authenticationRequired: false
  receiptCheckMode: RECEIVE_ALL
`, addr, filepath.Join(dir, "data"))
	cmd := "serve"
	if proxyYAML != "" {
		cmd = "proxy"
		cfg += proxyYAML
	} else {
		cfg += "node: bench\n"
	}
	cfg += extraYAML
	cfgPath := filepath.Join(dir, "weir.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, "", err
	}
	p, err := startProc(name, filepath.Join(dir, "weir.log"), h.bin("weir"), cmd, "--config", cfgPath)
	if err != nil {
		return nil, "", err
	}
	if err := p.waitHTTP("http://"+addr+"/readyz", time.Minute); err != nil {
		p.stop()
		return nil, "", err
	}
	return p, "http://" + addr + "/datafeed", nil
}

// startAll starts every target of a scenario.
func (h *harness) startAll(scen string, targets []string) ([]*server, error) {
	var servers []*server
	for _, t := range targets {
		s, err := h.startTarget(scen, t)
		if err != nil {
			stopAll(servers)
			return nil, err
		}
		servers = append(servers, s)
	}
	return servers, nil
}

func stopAll(servers []*server) {
	for _, s := range servers {
		s.stop()
	}
}

// measure runs one measurement of load against s.
func (h *harness) measure(s *server, args []string) (sample, *loadSummary, error) {
	c0, m0, t0 := s.cpu(), machineBusy(), time.Now()
	res, loadCores, err := h.load(s.url, args...)
	if err != nil {
		return sample{}, nil, err
	}
	wall := time.Since(t0).Seconds()
	smp := sample{
		PostsPerS: res.PostsPerS, MiBPerS: res.MiBPerS, WireMiBPerS: res.WireMiBPerS,
		P50: res.Latency.P50, P99: res.Latency.P99, P999: res.Latency.P999,
		Errors: res.ErrorsTotal, PostsOK: res.PostsOK,
		SrvCores: (s.cpu() - c0).Seconds() / wall, LoadCores: loadCores,
	}
	smp.OtherCores = max(0, (machineBusy()-m0).Seconds()/wall-smp.SrvCores-smp.LoadCores)
	return smp, res, nil
}

// clean empties the fsync baseline's directory, so that big posts do not
// fill the disk, and fsyncs the directory so that the removal is committed
// now rather than during the next measurement.
func (s *server) clean() {
	if s.naiveDir == "" {
		return
	}
	_ = os.RemoveAll(s.naiveDir)
	_ = os.MkdirAll(s.naiveDir, 0o755)
	if d, err := os.Open(s.naiveDir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

func (h *harness) logSample(scen, target string, rep int, smp sample) {
	if !h.o.verbose {
		return
	}
	h.logf("  %s %s rep %d: %.1f posts/s, %.1f MiB/s, p50 %.2f p99 %.2f p99.9 %.2f ms, errors %d, CPU: server %.2f, load %.2f, other %.2f cores",
		scen, target, rep, smp.PostsPerS, smp.MiBPerS, smp.P50, smp.P99, smp.P999, smp.Errors, smp.SrvCores, smp.LoadCores, smp.OtherCores)
}

// finish records each target's row and stops its servers.
func (h *harness) finish(scen string, load func(target string) string, servers []*server, samples map[string][]sample) {
	for _, s := range servers {
		r := medianRow(samples[s.target])
		r.Scenario, r.Target = scen, s.target
		if load != nil {
			r.Load = load(s.target)
		}
		r.RSS = s.procs[0].peakRSS()
		if len(s.procs) > 1 {
			r.RSS2 = s.procs[1].peakRSS()
		}
		h.rep.Rows = append(h.rep.Rows, r)
	}
	stopAll(servers)
	if !h.o.keep {
		for _, s := range servers {
			_ = os.RemoveAll(s.dir)
		}
	}
}

// closedLoop is a scenario of closed-loop measurements: every target is
// warmed up, then measured reps times, targets interleaved (so that noise
// from other work on the machine spreads over all of them).
func closedLoop(targets []string, args func(o *options, d time.Duration) []string) func(h *harness, s scenario) error {
	return func(h *harness, sc scenario) error {
		targets := targets
		if h.o.ceiling {
			targets = append(slices.Clip(targets), tGroup)
		}
		if h.o.transaction {
			targets = append(slices.Clip(targets), tWeirTx)
		}
		servers, err := h.startAll(sc.name, targets)
		if err != nil {
			return err
		}
		defer stopAll(servers)
		for _, s := range servers {
			if h.o.warmup > 0 {
				if _, _, err := h.load(s.url, args(h.o, h.o.warmup)...); err != nil {
					return err
				}
			}
		}
		samples := map[string][]sample{}
		for rep := 1; rep <= h.o.reps; rep++ {
			for _, s := range servers {
				smp, _, err := h.measure(s, args(h.o, h.o.duration))
				if err != nil {
					return err
				}
				samples[s.target] = append(samples[s.target], smp)
				h.logSample(sc.name, s.target, rep, smp)
			}
		}
		h.finish(sc.name, nil, servers, samples)
		return nil
	}
}

// bigPosts is a scenario of a few big posts per measurement.
func bigPosts(targets []string, args func(o *options) []string, gz bool) func(h *harness, s scenario) error {
	return func(h *harness, sc scenario) error {
		servers, err := h.startAll(sc.name, targets)
		if err != nil {
			return err
		}
		defer stopAll(servers)
		warm := []string{"-c", "2", "-n", "8", "-size", "4MiB"}
		if gz {
			warm = append(warm, "-gzip")
		}
		for _, s := range servers {
			if _, _, err := h.load(s.url, warm...); err != nil {
				return err
			}
		}
		samples := map[string][]sample{}
		for rep := 1; rep <= h.o.reps; rep++ {
			for _, s := range servers {
				smp, _, err := h.measure(s, args(h.o))
				if err != nil {
					return err
				}
				s.clean()
				samples[s.target] = append(samples[s.target], smp)
				h.logSample(sc.name, s.target, rep, smp)
			}
		}
		h.finish(sc.name, nil, servers, samples)
		return nil
	}
}

// countParts counts the parts of every stream the weir with this data
// directory has stored (each aggregate a proxy forwards is one stream with
// a part per post), with `weir admin stream list --json`.
func (h *harness) countParts(data string) (int64, error) {
	out, err := exec.CommandContext(h.ctx, h.bin("weir"), "admin", "stream", "list", "--json", "--data", data).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return 0, fmt.Errorf("weir admin stream list: %v %s", err, stderr)
	}
	var n int64
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var s struct {
			Parts int64 `json:"parts"`
		}
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return 0, fmt.Errorf("weir admin stream list: %v", err)
		}
		n += s.Parts
	}
	return n, sc.Err()
}

// waitArrived waits until the main service behind a proxy holds want
// parts, and returns when it saw them (or what it has at the timeout).
func (h *harness) waitArrived(data string, want int64, timeout time.Duration) (time.Time, int64, error) {
	deadline := time.Now().Add(timeout)
	for {
		got, err := h.countParts(data)
		now := time.Now()
		if err != nil {
			return now, 0, err
		}
		if got >= want || now.After(deadline) || h.ctx.Err() != nil {
			return now, got, h.ctx.Err()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runProxy measures sender -> weir proxy -> weir serve against sending
// straight to weir serve, with the same 45 KiB posts, for a proxy with the
// default settings (S2 entries) and one forwarding deflated zips.
func runProxy(h *harness, sc scenario) error {
	args := func(d time.Duration) []string {
		return []string{"-c", strconv.Itoa(h.o.conc), "-d", d.String(), "-lines", "999", "-chunked"}
	}
	servers, err := h.startAll(sc.name, []string{tWeir, tProxy, tProxyDeflate})
	if err != nil {
		return err
	}
	defer stopAll(servers)
	direct, proxies := servers[0], servers[1:]
	arrivalTimeout := max(2*time.Minute, 5*h.o.proxyDur)
	sent := map[*server]int64{} // posts each proxy acknowledged so far
	for _, s := range servers {
		if h.o.warmup > 0 {
			res, _, err := h.load(s.url, args(h.o.warmup)...)
			if err != nil {
				return err
			}
			if s != direct {
				sent[s] += res.PostsOK
			}
		}
	}
	for _, px := range proxies {
		if _, got, err := h.waitArrived(px.mainData, sent[px], arrivalTimeout); err != nil {
			return err
		} else if got < sent[px] {
			return fmt.Errorf("the warm-up posts did not all reach the main service through %s: %d of %d", px.target, got, sent[px])
		}
	}
	samples := map[string][]sample{}
	for rep := 1; rep <= h.o.reps; rep++ {
		smp, _, err := h.measure(direct, args(h.o.proxyDur))
		if err != nil {
			return err
		}
		samples[tWeir] = append(samples[tWeir], smp)
		h.logSample(sc.name, tWeir, rep, smp)

		for _, px := range proxies {
			// Through the proxy: the rate is posts / time until the last
			// arrived, the CPU is the proxy's and the main service's until then.
			c0, m0, t0 := px.cpu(), machineBusy(), time.Now()
			res, loadCores, err := h.load(px.url, args(h.o.proxyDur)...)
			if err != nil {
				return err
			}
			sendEnd := time.Now()
			sendStart := sendEnd.Add(-time.Duration(res.ElapsedS * float64(time.Second)))
			sent[px] += res.PostsOK
			arrived, got, err := h.waitArrived(px.mainData, sent[px], arrivalTimeout)
			if err != nil {
				return err
			}
			psmp := sample{
				PostsPerS: res.PostsPerS, MiBPerS: res.MiBPerS, WireMiBPerS: res.WireMiBPerS,
				P50: res.Latency.P50, P99: res.Latency.P99, P999: res.Latency.P999,
				Errors: res.ErrorsTotal, PostsOK: res.PostsOK, LoadCores: loadCores,
				SrvCores: (px.cpu() - c0).Seconds() / arrived.Sub(t0).Seconds(),
				E2E:      float64(res.PostsOK) / arrived.Sub(sendStart).Seconds(),
				Lag:      arrived.Sub(sendEnd).Seconds(),
				Lost:     max(sent[px]-got, 0),
			}
			// Here CPU is counted until the last post arrived; weir-load's
			// own share is spread over that time too.
			all := arrived.Sub(t0).Seconds()
			psmp.LoadCores *= sendEnd.Sub(t0).Seconds() / all
			psmp.OtherCores = max(0, (machineBusy()-m0).Seconds()/all-psmp.SrvCores-psmp.LoadCores)
			if got < sent[px] {
				h.logf("  %s rep %d: only %d of %d posts reached the main service within %s", px.target, rep, got, sent[px], arrivalTimeout)
				sent[px] = got // count the next repetition from what is there
			}
			samples[px.target] = append(samples[px.target], psmp)
			if h.o.verbose {
				h.logf("  %s rep %d: received %.1f posts/s, end to end %.1f posts/s, last arrived %.2fs after sending ended, lost %d, CPU: proxy and main %.2f, load %.2f, other %.2f cores",
					px.target, rep, psmp.PostsPerS, psmp.E2E, psmp.Lag, psmp.Lost, psmp.SrvCores, psmp.LoadCores, psmp.OtherCores)
			}
		}
	}
	h.finish(sc.name, nil, servers, samples)
	return nil
}

// runRate sends 45 KiB posts at half of weir's closed-loop peak.
func runRate(h *harness, sc scenario) error {
	closed := func(d time.Duration) []string {
		return []string{"-c", strconv.Itoa(h.o.conc), "-d", d.String(), "-lines", "999", "-chunked"}
	}
	servers, err := h.startAll(sc.name, []string{tWeir})
	if err != nil {
		return err
	}
	defer stopAll(servers)
	s := servers[0]
	if h.o.warmup > 0 {
		if _, _, err := h.load(s.url, closed(h.o.warmup)...); err != nil {
			return err
		}
	}
	peak, from := 0.0, "scenario 45k"
	for _, r := range h.rep.Rows {
		if r.Scenario == "45k" && r.Target == tWeir {
			peak = r.PostsPerS
		}
	}
	if peak == 0 {
		from = "measured here, as 45k was not run"
		res, _, err := h.load(s.url, closed(h.o.duration)...)
		if err != nil {
			return err
		}
		peak = res.PostsPerS
	}
	if peak <= 0 {
		return fmt.Errorf("no closed-loop peak to halve (weir answered no post)")
	}
	rate := peak / 2
	h.logf("  rate: %.1f posts/s, half of the closed-loop peak %.1f posts/s (%s)", rate, peak, from)
	// At most 64 posts in flight, weir's receive.maxConcurrentReceipts: when
	// weir stalls, later posts wait (and their wait counts as latency)
	// rather than being refused.
	args := []string{"-mode", "rate", "-rate", strconv.FormatFloat(rate, 'f', 1, 64), "-max-outstanding", "64",
		"-d", h.o.rateDur.String(), "-lines", "999", "-chunked"}
	samples := map[string][]sample{}
	for rep := 1; rep <= h.o.reps; rep++ {
		smp, _, err := h.measure(s, args)
		if err != nil {
			return err
		}
		samples[tWeir] = append(samples[tWeir], smp)
		h.logSample(sc.name, tWeir, rep, smp)
	}
	h.finish(sc.name, func(string) string {
		return fmt.Sprintf("%.0f posts/s = half of %.0f (%s)", rate, peak, from)
	}, servers, samples)
	return nil
}
