package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
)

// FileDestination writes each aggregate as a directory holding proxy.zip
// (the Stroom-format zip) and proxy.meta (its common attributes), the
// layout the reference proxy's directory scanner reads. The directory is
// written under a temporary name, fsynced and renamed, so a reader never
// sees a partial item; its name (proxy id and aggregate id) is the same on
// every attempt, so a resend after a crash finds it already there.
type FileDestination struct {
	cfg     config.FileDestination
	proxyID string
	now     func() time.Time
}

// NewFileDestination checks the directory and builds the destination.
func NewFileDestination(cfg config.FileDestination, proxyID string, now func() time.Time) (*FileDestination, error) {
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(cfg.Path, 0o750); err != nil {
		return nil, fmt.Errorf("forwardFileDestinations %q: path: %w", cfg.Name, err)
	}
	return &FileDestination{cfg: cfg, proxyID: proxyID, now: now}, nil
}

func (d *FileDestination) Name() string      { return d.cfg.Name }
func (d *FileDestination) Target() string    { return "file://" + d.cfg.Path }
func (d *FileDestination) HasLiveness() bool { return d.cfg.LivenessCheckPath != "" }

// Live reports whether the liveness path exists.
func (d *FileDestination) Live(context.Context) error {
	if d.cfg.LivenessCheckPath == "" {
		return nil
	}
	if _, err := os.Stat(d.cfg.LivenessCheckPath); err != nil {
		return fmt.Errorf("liveness check path: %w", err)
	}
	return nil
}

var templateParam = regexp.MustCompile(`\$\{([A-Za-z]+)\}`)

// subPath resolves the sub-path template for an aggregate; every value is
// made safe as one path element.
func (d *FileDestination) subPath(a meta.Aggregate) string {
	t := d.now().UTC()
	vals := map[string]string{
		"feed": a.Feed, "type": a.Type, "year": t.Format("2006"), "month": t.Format("01"), "day": t.Format("02"),
		"hour": t.Format("15"), "minute": t.Format("04"), "second": t.Format("05"),
	}
	return templateParam.ReplaceAllStringFunc(d.cfg.SubPathTemplate, func(m string) string {
		v, ok := vals[strings.ToLower(m[2:len(m)-1])]
		if !ok {
			return "XXX"
		}
		return safeElement(v)
	})
}

func safeElement(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	if len(b) == 0 || string(b) == "." || string(b) == ".." {
		return "_"
	}
	return string(b)
}

// Send writes the aggregate's directory.
func (d *FileDestination) Send(ctx context.Context, a meta.Aggregate, attrs *attr.Map, write func(io.Writer) error) Outcome {
	start := d.now()
	dir := filepath.Join(d.cfg.Path, d.subPath(a))
	name := fmt.Sprintf("%s-%010d", d.proxyID, a.ID)
	final := filepath.Join(dir, name)
	out := Outcome{}
	fail := func(err error) Outcome {
		out.Err, out.Message, out.Duration = err, err.Error(), d.now().Sub(start)
		return out
	}
	if _, err := os.Stat(final); err == nil {
		// A previous attempt got this far before a crash.
		return Outcome{OK: true, Receipt: final, Duration: d.now().Sub(start)}
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fail(err)
	}
	tmp := filepath.Join(dir, ".tmp-"+name)
	_ = os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o750); err != nil {
		return fail(err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(tmp)
		}
	}()
	n, err := writeFileSync(filepath.Join(tmp, "proxy.zip"), write)
	out.Bytes = n
	if err != nil {
		return fail(err)
	}
	if _, err := writeFileSync(filepath.Join(tmp, "proxy.meta"), func(w io.Writer) error {
		_, err := w.Write(attr.AppendMeta(nil, attrs))
		return err
	}); err != nil {
		return fail(err)
	}
	if err := syncDir(tmp); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fail(err)
	}
	if err := syncDir(dir); err != nil {
		return fail(err)
	}
	ok = true
	return Outcome{OK: true, Receipt: final, Bytes: n, Duration: d.now().Sub(start)}
}

func writeFileSync(path string, write func(io.Writer) error) (int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return 0, err
	}
	cw := &countWriter{w: f}
	bw := bufio.NewWriterSize(cw, 256<<10)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return cw.n, fmt.Errorf("write %s: %w", path, err)
	}
	return cw.n, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
