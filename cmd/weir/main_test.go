// Process-level tests of the weir binary: TestMain builds it once, and the
// helpers here run `weir serve` as a child process on a loopback port and
// `weir admin ...` as short-lived commands against the same data directory
// and database. The database is SQLite in the data directory, or PostgreSQL
// in a fresh schema when WEIR_TEST_DB=postgres.
package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/meta/metatest"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/streamfile"
)

// weirBin is the binary TestMain built.
var weirBin string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "weir-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "weir tests: temp dir for the binary: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	weirBin = filepath.Join(dir, "weir")
	// The package directory is cmd/weir, so "." is the command. The binary is
	// built without -race even when the tests are: the child processes are
	// the system under test, the race detector guards the test code.
	cmd := exec.Command(goTool(), "build", "-o", weirBin, ".")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "weir tests: go build ./cmd/weir failed: %v\n", err)
		return 1
	}
	if testingVerbose() {
		fmt.Fprintf(os.Stderr, "weir tests: built %s in %s\n", weirBin, time.Since(start).Round(time.Millisecond))
	}
	return m.Run()
}

// testingVerbose reports -test.v without calling flag.Parse before m.Run.
func testingVerbose() bool {
	for _, a := range os.Args[1:] {
		if a == "-test.v" || a == "-test.v=true" || a == "-v" {
			return true
		}
	}
	return false
}

// goTool is the go command of the toolchain running the tests: $GOROOT/bin/go
// when go test set GOROOT, else the go on PATH.
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

// weirEnv is one weir installation: a data directory, a database and a
// node name, optionally a config file.
type weirEnv struct {
	t      *testing.T
	data   string
	db     string // "" for SQLite in the data directory
	node   string
	config string // path of the YAML config, or ""
	// onOwnFUSE: data is a power-cut filesystem this test process serves
	// (cmd/weir/powercut_test.go); see openStore.
	onOwnFUSE bool
}

// newEnv makes a fresh installation whose config file sets receive.X for
// each "X: value" line given, on top of receive.authenticationRequired:
// false: these tests prove receipt and storage, not sender authentication
// (which is required by default).
func newEnv(t *testing.T, receive ...string) *weirEnv {
	t.Helper()
	var b strings.Builder
	b.WriteString("receive:\n  authenticationRequired: false\n")
	for _, line := range receive {
		b.WriteString("  " + line + "\n")
	}
	return newEnvConfig(t, b.String())
}

// newEnvConfig makes a fresh installation with exactly this config file
// (none when configYAML is empty).
func newEnvConfig(t *testing.T, configYAML string) *weirEnv {
	t.Helper()
	e := &weirEnv{t: t, data: filepath.Join(t.TempDir(), "data"), node: "proof-node"}
	if os.Getenv("WEIR_TEST_DB") == "postgres" {
		// Registered first, so its cleanup (dropping the schema) runs after
		// every server of the test has been stopped.
		e.db = metatest.PostgresDSN(t)
	}
	if configYAML != "" {
		e.config = writeFile(t, "weir.yaml", configYAML)
	}
	return e
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// storageArgs are the flags that point a command at this installation.
func (e *weirEnv) storageArgs() []string {
	args := []string{"--data", e.data}
	if e.db != "" {
		args = append(args, "--db", e.db)
	}
	if e.config != "" {
		args = append(args, "--config", e.config)
	}
	return args
}

// cliResult is how a short-lived weir command ended.
type cliResult struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("weir %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// run runs the weir binary with exactly args and a generous upper bound.
func run(t *testing.T, args ...string) cliResult {
	t.Helper()
	return runWithin(t, 2*time.Minute, args...)
}

// runWithin runs the weir binary with exactly args; it fails the test if the
// command does not exit within limit (it is killed then).
func runWithin(t *testing.T, limit time.Duration, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, weirBin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cliResult{args: args, stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		res.code = ee.ExitCode()
	case ctx.Err() != nil:
		t.Fatalf("weir %s did not exit within %s\nstderr:\n%s", strings.Join(args, " "), limit, stderr.String())
	default:
		t.Fatalf("weir %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return res
}

// admin runs `weir admin ARGS...` against this installation.
func (e *weirEnv) admin(args ...string) cliResult {
	e.t.Helper()
	return run(e.t, append(append([]string{"admin"}, args...), e.storageArgs()...)...)
}

// mustAdmin runs an admin command that must succeed and returns its stdout.
func (e *weirEnv) mustAdmin(args ...string) string {
	e.t.Helper()
	r := e.admin(args...)
	if r.code != 0 {
		e.t.Fatalf("%s", r)
	}
	return r.stdout
}

// streamJSON is one line of `weir admin stream list --json`.
type streamJSON struct {
	ID         int64             `json:"id"`
	Feed       string            `json:"feed"`
	Type       string            `json:"type"`
	Status     string            `json:"status"`
	ReceiptID  string            `json:"receiptId"`
	Node       string            `json:"node"`
	Parts      int               `json:"parts"`
	RawSize    int64             `json:"rawSize"`
	FileSize   int64             `json:"fileSize"`
	Attributes map[string]string `json:"attributes"`
}

// listStreams runs `admin stream list --json` with extra filter flags.
func (e *weirEnv) listStreams(filter ...string) []streamJSON {
	e.t.Helper()
	out := e.mustAdmin(append([]string{"stream", "list", "--json"}, filter...)...)
	var streams []streamJSON
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var s streamJSON
		dec := json.NewDecoder(bytes.NewReader(line))
		if err := dec.Decode(&s); err != nil {
			e.t.Fatalf("stream list --json: line %q: %v", line, err)
		}
		streams = append(streams, s)
	}
	if err := sc.Err(); err != nil {
		e.t.Fatal(err)
	}
	return streams
}

// listStreamsHaving lists the streams once every one of receipts is among
// them. With store.commit: log a small post is answered before its row is
// in the database (a few milliseconds later), and API calls on the server
// wait for it, but the admin CLI, another process, reads the database as
// it is. A bound on a hang, not a measure of speed: fails after 30 s.
func (e *weirEnv) listStreamsHaving(receipts ...string) []streamJSON {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		streams := e.listStreams()
		have := make(map[string]bool, len(streams))
		for _, s := range streams {
			have[s.ReceiptID] = true
		}
		var missing []string
		for _, r := range receipts {
			if !have[r] {
				missing = append(missing, r)
			}
		}
		if len(missing) == 0 {
			return streams
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d acknowledged posts not listed 30 s after their answers, e.g. %s", len(missing), missing[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// storeReader is the Go API view of an installation, opened read-only (safe
// beside a running server, as the admin commands are).
type storeReader struct {
	repo  *meta.Repo
	codec *streamfile.Codec
	store *store.Store
}

func (e *weirEnv) openStore() *storeReader {
	e.t.Helper()
	ctx := context.Background()
	dbDir := e.data
	if e.onOwnFUSE && e.db == "" {
		dbDir = e.copySQLite()
	}
	repo, err := meta.Open(ctx, e.db, dbDir, nil)
	if err != nil {
		e.t.Fatalf("open metadata: %v", err)
	}
	codec, err := streamfile.NewCodec()
	if err != nil {
		_ = repo.Close()
		e.t.Fatalf("codec: %v", err)
	}
	st, err := store.Open(ctx, repo, codec, store.Options{
		Root: filepath.Join(e.data, "store"), Node: "proof-reader", ReadOnly: true,
	})
	if err != nil {
		codec.Close()
		_ = repo.Close()
		e.t.Fatalf("open store: %v", err)
	}
	r := &storeReader{repo: repo, codec: codec, store: st}
	e.t.Cleanup(r.close)
	return r
}

func (r *storeReader) close() {
	if r.store != nil {
		r.store.Close()
		r.codec.Close()
		_ = r.repo.Close()
		r.store = nil
	}
}

// path is where the store keeps a stream's file.
func (r *storeReader) path(id int64) (string, error) {
	st, err := r.repo.GetStream(context.Background(), id)
	if err != nil {
		return "", err
	}
	return r.store.Path(st), nil
}

// section opens one channel of one part (0-based) of a stream.
func (r *storeReader) section(id int64, ch streamfile.Channel, part int) (*io.SectionReader, func(), error) {
	rd, err := r.store.Open(context.Background(), id)
	if err != nil {
		return nil, nil, err
	}
	sec, err := rd.Section(ch, part)
	if err != nil {
		rd.Close()
		return nil, nil, err
	}
	return sec, func() { rd.Close() }, nil
}

// lockFiles lists files left with the in-flight suffix under <data>/store.
func (e *weirEnv) lockFiles() []string {
	e.t.Helper()
	var found []string
	for _, p := range e.storeFiles() {
		if strings.HasSuffix(p, ".lock") {
			found = append(found, p)
		}
	}
	return found
}

// copySQLite copies the SQLite database (and its WAL) out of the data
// directory, for a test process that serves the data directory's FUSE
// filesystem itself. SQLite maps its WAL index (-shm) into memory; a page
// fault on a FUSE-backed mapping waits in the kernel for this process's
// FUSE server, and if the Go runtime stops the world for a collection
// meanwhile, it waits for the faulting thread too, so neither ever runs
// again (the test once hung until go test killed it). Reading the files
// with read(2) does not block a stop-the-world. The copy is consistent
// because the server is idle while the test verifies; SQLite rebuilds the
// index from the WAL.
func (e *weirEnv) copySQLite() string {
	e.t.Helper()
	dir := e.t.TempDir()
	for _, name := range []string{"weir.db", "weir.db-wal"} {
		b, err := os.ReadFile(filepath.Join(e.data, name))
		if errors.Is(err, os.ErrNotExist) && name != "weir.db" {
			continue
		}
		if err != nil {
			e.t.Fatalf("copy the database out of the power-cut filesystem: %v", err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			e.t.Fatal(err)
		}
	}
	return dir
}

// storeFiles lists every file under <data>/store.
func (e *weirEnv) storeFiles() []string {
	e.t.Helper()
	var found []string
	root := filepath.Join(e.data, "store")
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("walk %s: %v", root, err)
	}
	return found
}

// syncBuffer collects a child's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// server is a running `weir serve` child process.
type server struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string // 127.0.0.1:port
	url    string // http://127.0.0.1:port
	logs   *syncBuffer
	exited chan struct{} // closed when the process has exited
	state  *os.ProcessState
}

// freePort asks the kernel for a free loopback port. Another process may take
// it before weir binds it; startServer retries when that happens.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startServer starts `weir serve` on a free loopback port and waits until it
// is ready. It fails the test if the server does not start.
func (e *weirEnv) startServer(extra ...string) *server {
	e.t.Helper()
	for attempt := 1; ; attempt++ {
		s, err := e.tryStartServer(extra...)
		if err == nil {
			// Make sure the test runs on the database it claims to.
			engine := `"db":"sqlite"`
			if e.db != "" {
				engine = `"db":"postgres"`
			}
			if !strings.Contains(s.logs.String(), engine) {
				e.t.Fatalf("weir serve did not log %s at start:\n%s", engine, s.logs.String())
			}
			return s
		}
		if errors.Is(err, errAddrInUse) && attempt < 5 {
			e.t.Logf("start attempt %d: %v; retrying on another port", attempt, err)
			continue
		}
		e.t.Fatalf("start weir serve: %v", err)
	}
}

var errAddrInUse = errors.New("address already in use")

func (e *weirEnv) tryStartServer(extra ...string) (*server, error) {
	t := e.t
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	args := append([]string{"serve", "--listen", addr, "--node", e.node}, e.storageArgs()...)
	args = append(args, extra...)
	s := &server{t: t, addr: addr, url: "http://" + addr, logs: &syncBuffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command(weirBin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", weirBin, err)
	}
	go func() {
		_ = s.cmd.Wait()
		s.state = s.cmd.ProcessState
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("weir serve (pid %d) log tail:\n%s", s.cmd.Process.Pid, tail(s.logs.String(), 6000))
		}
	})

	// Wait for "weir started", then for /readyz.
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(s.logs.String(), `"msg":"weir started"`) {
		select {
		case <-s.exited:
			logs := s.logs.String()
			if strings.Contains(logs, "address already in use") {
				return nil, fmt.Errorf("%s: %w", addr, errAddrInUse)
			}
			return nil, fmt.Errorf("weir serve exited (%s) before it started:\n%s", s.state, logs)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("weir serve did not log \"weir started\" within 2 minutes:\n%s", s.logs.String())
		}
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		resp, err := client.Get(s.url + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				client.CloseIdleConnections()
				return s, nil
			}
			err = fmt.Errorf("readyz: %d %s", resp.StatusCode, body)
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("weir serve exited (%s) before it was ready:\n%s", s.state, s.logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("weir serve not ready within 2 minutes: %v\n%s", err, s.logs.String())
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}

// pid is the child's process id.
func (s *server) pid() int { return s.cmd.Process.Pid }

// kill stops the process with SIGKILL (if it still runs) and waits for it.
func (s *server) kill() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-s.exited:
	case <-time.After(time.Minute):
		s.t.Errorf("weir serve (pid %d) did not exit within a minute of SIGKILL", s.pid())
	}
}

// terminate sends SIGTERM and waits up to a minute for the process to exit;
// it returns the exit code (-1 for a signal death).
func (s *server) terminate() int {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatalf("SIGTERM: %v", err)
	}
	return s.wait(time.Minute)
}

// wait waits for the process to exit and returns its exit code.
func (s *server) wait(limit time.Duration) int {
	s.t.Helper()
	select {
	case <-s.exited:
		return s.state.ExitCode()
	case <-time.After(limit):
		s.kill()
		s.t.Fatalf("weir serve (pid %d) did not exit within %s; killed it", s.pid(), limit)
		return -1
	}
}

// peakRSS is VmHWM of the running server, in bytes.
func (s *server) peakRSS() int64 {
	s.t.Helper()
	return vmHWM(s.t, s.pid())
}

// vmHWM is the peak resident set size of a running process, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read /proc status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				t.Fatalf("unexpected VmHWM line %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// newClient is an HTTP client for loopback posts; timeout bounds every request.
func newClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:               nil,
			DisableCompression:  true,
			MaxIdleConnsPerHost: 64,
			WriteBufferSize:     256 << 10,
			ReadBufferSize:      64 << 10,
		},
	}
}

// response is what a post got back.
type response struct {
	status int
	header http.Header
	body   string
}

// postBody posts body to /datafeed with the given headers. contentLength < 0
// sends it chunked.
func postBody(ctx context.Context, c *http.Client, url string, body io.Reader, contentLength int64, headers map[string]string) (response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/datafeed", body)
	if err != nil {
		return response{}, err
	}
	if contentLength >= 0 {
		req.ContentLength = contentLength
	} else {
		req.ContentLength = -1
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return response{}, fmt.Errorf("read response: %w", err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}, nil
}

// receiptID extracts the receipt id from a 200 body, checking its form.
func receiptID(t *testing.T, node string, r response) string {
	t.Helper()
	id, ok := strings.CutSuffix(r.body, "\n")
	if !ok || !isReceiptID(id, node) {
		t.Errorf("200 body %q is not a receipt id of node %s and a newline", r.body, node)
	}
	return id
}

// isReceiptID checks <13-digit epoch ms>_<4-digit sequence>_S_<node>.
func isReceiptID(id, node string) bool {
	f := strings.SplitN(id, "_", 4)
	if len(f) != 4 || len(f[0]) != 13 || len(f[1]) != 4 || f[2] != "S" || f[3] != node {
		return false
	}
	for _, s := range f[:2] {
		if _, err := strconv.ParseUint(s, 10, 64); err != nil {
			return false
		}
	}
	return true
}

// freeDisk is the space available to this user on the volume holding dir.
func freeDisk(t *testing.T, dir string) uint64 {
	t.Helper()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return st.Bavail * uint64(st.Bsize)
}
