// Package cli is weir's command line: `weir serve` and the offline
// `weir admin` commands, which work on the same data directory or database
// as a running server.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/weirhq/weir/internal/app"
	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/feed"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/streamfile"
)

const usage = `weir receives event data on /datafeed and stores every post durably as a stream.

Usage:
  weir serve [--config FILE] [--listen ADDR] [--data DIR] [--db DSN] [--node NAME]
  weir proxy [--config FILE] [--listen ADDR] [--data DIR] [--db DSN] [--proxy-id ID] [--forward URL ...]
  weir proxy queue [--destination NAME] [--state queued|retrying|failed] [--json]
  weir proxy show AGGREGATE [--destination NAME]
  weir proxy replay --destination NAME (--all | AGGREGATE ...)
  weir admin feed create NAME [--status RECEIVE|REJECT|DROP] [--type TYPE] [--encoding E]
                              [--context-encoding E] [--classification C] [--description D]
  weir admin feed update NAME [same flags as create; only the given ones change]
  weir admin feed list [--json]
  weir admin stream list [--feed NAME] [--status STATUS] [--receipt ID] [--json]
  weir admin stream cat ID [--part N] [--child Context|"Meta Data"]
  weir admin receipt-rules show
  weir admin receipt-rules set FILE|-          (a JSON array of rules, as show prints them)
  weir admin datafeed-key create --account ID [--expires DURATION] [--attr K=V ...]
  weir admin datafeed-key list [--account ID] [--json]
  weir admin datafeed-key revoke ID
  weir admin api-key create --user NAME [--name N] [--comments C] [--expires DURATION]
  weir admin api-key list [--user NAME] [--json]
  weir admin api-key disable|enable|delete ID
  weir admin user create NAME [--display-name D] [--group]
  weir admin user list [--json]
  weir admin user show NAME
  weir admin user disable|enable NAME
  weir admin user grant|revoke NAME PERMISSION
  weir admin user feed NAME FEED USE|VIEW|EDIT|DELETE|OWNER|NONE
  weir admin group add|remove GROUP MEMBER

Every command takes --config, --data and --db; flags override the config file.
`

// Main runs the command line and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	err := run(args, stdout, stderr)
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "weir: %v\n\n%s", err, usage)
		return 2
	}
	fmt.Fprintf(stderr, "weir: %v\n", err)
	return 1
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("no command given")
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "admin":
		return admin(args[1:], stdout, stderr)
	case "proxy":
		return proxyCmd(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		return flag.ErrHelp
	}
	return usagef("unknown command %q", args[0])
}

// common holds the flags every command takes.
type common struct {
	config, data, db, listen, node string
	profiles
}

// profiles names the files a server writes profiles of its whole run to
// (for `go tool pprof`), finished at shutdown; empty names none.
type profiles struct {
	cpu, mem string
}

func (p *profiles) register(fs *flag.FlagSet) {
	fs.StringVar(&p.cpu, "cpuprofile", "", "write a CPU profile of the whole run to this file (for go tool pprof)")
	fs.StringVar(&p.mem, "memprofile", "", "write a profile of the whole run's allocations to this file at shutdown (for go tool pprof)")
}

// start starts the CPU profile; the stop it returns ends it and writes
// the allocation profile.
func (p profiles) start() (stop func() error, err error) {
	var cpu *os.File
	if p.cpu != "" {
		if cpu, err = os.Create(p.cpu); err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			cpu.Close()
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			if err := cpu.Close(); err != nil {
				errs = append(errs, fmt.Errorf("cpu profile: %w", err))
			}
		}
		if p.mem != "" {
			if err := writeAllocs(p.mem); err != nil {
				errs = append(errs, fmt.Errorf("memory profile: %w", err))
			}
		}
		return errors.Join(errs...)
	}, nil
}

// writeAllocs writes the allocations since the start (sampled, one per
// 512 KiB on average) and the live heap to path.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (c *common) register(fs *flag.FlagSet, server bool) {
	fs.StringVar(&c.config, "config", "", "YAML configuration file")
	fs.StringVar(&c.data, "data", "", "data directory (default ./weir-data)")
	fs.StringVar(&c.db, "db", "", "metadata database: empty for SQLite in the data directory, or a postgres:// URL")
	if server {
		fs.StringVar(&c.listen, "listen", "", "address to listen on (default 127.0.0.1:8080)")
		c.profiles.register(fs)
	}
	// Admin commands parse --node only to refuse it (see openStorage).
	fs.StringVar(&c.node, "node", "", "node name used in receipt ids (default: the host name)")
}

// load reads the config file (if any) and applies the flags that were set.
func (c *common) load(fs *flag.FlagSet) (config.Config, error) {
	cfg := config.Default()
	if c.config != "" {
		var err error
		if cfg, err = config.Load(c.config); err != nil {
			return cfg, err
		}
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "data":
			cfg.Data = c.data
		case "db":
			cfg.DB = c.db
		case "listen":
			cfg.Listen = c.listen
		case "node":
			cfg.Node = c.node
		}
	})
	return cfg, nil
}

// flagOptions are the configuration options the flags given set, which
// the file's lines do not name then.
func flagOptions(fs *flag.FlagSet) []string {
	var opts []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "data", "db", "listen", "node":
			opts = append(opts, f.Name)
		case "proxy-id":
			opts = append(opts, "proxyId")
		case "forward":
			opts = append(opts, "forwardHttpDestinations")
		}
	})
	return opts
}

// openStorage loads and validates the configuration the flags name and
// opens its storage read-only (safe beside a running server). The caller
// closes the storage.
func (c *common) openStorage(fs *flag.FlagSet, stderr io.Writer) (config.Config, *app.Open, error) {
	// An admin command runs as no node: it opens the store read-only (no
	// recovery of a node's leftovers, no pack files, no node lock) and
	// reads and changes rows, which belong to no node. --node would be
	// silently ignored, as if it chose whose streams are listed or
	// recovered; it does not. (A node: in a configuration file shared
	// with serve is no error.)
	if visited(fs, "node") {
		return config.Config{}, nil, usagef("--node applies to weir serve only (the node a server runs as, named in its receipt ids; " +
			"a proxy's is --proxy-id): admin commands act on the whole data directory or database, as no node")
	}
	cfg, err := c.load(fs)
	if err != nil {
		return cfg, nil, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, nil, fmt.Errorf("invalid configuration:\n%w", config.AtLines(c.config, err, flagOptions(fs)...))
	}
	// A SQLite database that is not there yet is created, so that feeds
	// and keys can be provisioned before the first start; but a mistyped
	// --data would otherwise list nothing, or create a feed or key no
	// server sees, without a word.
	dbFile := filepath.Join(cfg.Data, meta.SQLiteFile)
	_, statErr := os.Stat(dbFile)
	fresh := cfg.DB == "" && errors.Is(statErr, os.ErrNotExist)
	log := app.NewLogger(config.Log{Level: "warn", Format: "text"}, stderr)
	st, err := app.OpenStorage(context.Background(), cfg, "admin", log, nil, true)
	if err == nil && fresh {
		abs, _ := filepath.Abs(dbFile)
		fmt.Fprintf(stderr, "note: there was no weir database at %s: created a new, empty one "+
			"(if a server's data is elsewhere, give its --data or --config)\n", abs)
	}
	return cfg, st, err
}

// parse parses flags that may come before, between or after positional
// arguments (`feed create NAME --status DROP`) and returns the positionals.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%v", err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func serve(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var c common
	c.register(fs, true)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("serve takes no arguments, got %q", pos)
	}
	cfg, err := c.load(fs)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", config.AtLines(c.config, err, flagOptions(fs)...))
	}
	return runServer(cfg.Log, c.profiles, stderr, func(ctx context.Context, log *slog.Logger) (*app.App, error) {
		return app.New(ctx, cfg, log)
	})
}

// runServer starts a server (the main service or a proxy) with the
// process logger and serves until SIGINT or SIGTERM, writing the profiles
// prof names.
func runServer(lc config.Log, prof profiles, stderr io.Writer, start func(context.Context, *slog.Logger) (*app.App, error)) error {
	log := app.NewLogger(lc, stderr)
	procs, was := setServerProcs()
	log.Debug("scheduler", "GOMAXPROCS", procs, "started with", was, "cpus", runtime.NumCPU())
	stopProfiles, err := prof.start()
	if err != nil {
		return err
	}
	defer func() {
		if err := stopProfiles(); err != nil {
			log.Error("profiles", "err", err)
		}
	}()
	// The first SIGTERM or SIGINT starts the graceful stop; then the
	// signals get their default action again, so that a second one ends
	// the process at once, as a crash would: nothing acknowledged is lost,
	// and an operator need not wait out the grace period of posts that
	// will not finish.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case sig := <-sigs:
			signal.Stop(sigs)
			log.Info("stopping: in-flight posts have up to 30s; a second signal ends weir at once", "signal", sig.String())
			cancel()
		case <-ctx.Done():
		}
	}()
	a, err := start(ctx, log)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

func admin(args []string, stdout, stderr io.Writer) error {
	// `weir admin --help`, `weir admin feed -h`: the usage, as for any
	// other command's --help.
	for _, a := range args[:min(len(args), 2)] {
		switch a {
		case "-h", "-help", "--help", "help":
			return flag.ErrHelp
		}
	}
	if len(args) < 2 {
		return usagef("admin needs a subject and an action, e.g. `weir admin feed list`")
	}
	subject, action := args[0], args[1]
	if strings.HasPrefix(subject, "-") || strings.HasPrefix(action, "-") {
		return usagef("admin flags come after the subject and action, e.g. `weir admin feed list --data DIR`; got %q first", strings.Join(args[:2], " "))
	}
	switch subject {
	case "datafeed-key":
		return adminDataFeedKey(action, args[2:], stdout, stderr)
	case "api-key", "user", "group":
		return adminAccess(subject, action, args[2:], stdout, stderr)
	}
	fs := flag.NewFlagSet("admin "+subject+" "+action, flag.ContinueOnError)
	var c common
	c.register(fs, false)
	var f feedFlags
	var sf streamFlags
	switch subject + " " + action {
	case "feed create", "feed update":
		f.register(fs)
	case "feed list":
		fs.BoolVar(&sf.json, "json", false, "one JSON object per line")
	case "stream list":
		fs.StringVar(&sf.feed, "feed", "", "only streams of this feed")
		fs.StringVar(&sf.status, "status", "", "only streams with this status (LOCKED, UNLOCKED, DELETED)")
		fs.StringVar(&sf.receipt, "receipt", "", "only streams holding the post with this receipt id (this service's, or one a proxy gave its sender)")
		fs.BoolVar(&sf.json, "json", false, "one JSON object per line")
	case "receipt-rules show", "receipt-rules set":
	case "stream cat":
		fs.IntVar(&sf.part, "part", 0, "part number, from 1 (default: all parts)")
		fs.StringVar(&sf.child, "child", "", `child stream: Context or "Meta Data" (default: the data)`)
	default:
		return usagef("unknown admin command %q", subject+" "+action)
	}
	pos, err := parse(fs, args[2:])
	if err != nil {
		return err
	}
	cfg, st, err := c.openStorage(fs, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	ctx := context.Background()
	switch subject + " " + action {
	case "feed create":
		if len(pos) != 1 {
			return usagef("feed create takes one feed name")
		}
		return f.create(ctx, st.Repo, cfg, pos[0], fs, stdout, stderr)
	case "feed update":
		if len(pos) != 1 {
			return usagef("feed update takes one feed name")
		}
		return f.update(ctx, st.Repo, pos[0], fs, stdout)
	case "feed list":
		if len(pos) != 0 {
			return usagef("feed list takes no arguments, got %q", pos)
		}
		return listFeeds(ctx, st.Repo, sf.json, stdout)
	case "stream list":
		if len(pos) != 0 {
			return usagef("stream list takes no arguments, got %q (filter with --feed, --status, --receipt)", pos)
		}
		switch meta.Status(strings.ToUpper(sf.status)) {
		case "", meta.Locked, meta.Unlocked, meta.Deleted:
		default:
			return usagef("--status %q is not one of %s, %s, %s", sf.status, meta.Locked, meta.Unlocked, meta.Deleted)
		}
		return sf.list(ctx, st.Repo, stdout)
	case "receipt-rules show":
		if len(pos) != 0 {
			return usagef("receipt-rules show takes no arguments")
		}
		return showReceiptRules(ctx, st.Repo, stdout)
	case "receipt-rules set":
		if len(pos) != 1 {
			return usagef("receipt-rules set takes one file of rules (a JSON array), or - for standard input")
		}
		return setReceiptRules(ctx, st.Repo, pos[0], os.Stdin, stdout)
	default: // stream cat
		if len(pos) != 1 {
			return usagef("stream cat takes one stream id")
		}
		id, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil || id <= 0 {
			return usagef("stream id %q is not a positive number", pos[0])
		}
		return sf.cat(ctx, st, id, stdout)
	}
}

type feedFlags struct {
	status, typ, encoding, contextEncoding, classification, description string
}

func (f *feedFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.status, "status", "", "RECEIVE, REJECT or DROP (default RECEIVE)")
	fs.StringVar(&f.typ, "type", "", "default stream type (default Raw Events)")
	fs.StringVar(&f.encoding, "encoding", "", "character encoding of the data (default UTF-8)")
	fs.StringVar(&f.contextEncoding, "context-encoding", "", "character encoding of context data (default UTF-8)")
	fs.StringVar(&f.classification, "classification", "", "classification shown with the data")
	fs.StringVar(&f.description, "description", "", "free text")
}

// apply sets the fields whose flags were given.
func (f *feedFlags) apply(fd *feed.Feed, fs *flag.FlagSet, types []string) error {
	var err error
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "status":
			var st feed.Status
			if st, err = feed.ParseStatus(f.status); err == nil {
				fd.Status = st
			}
		case "type":
			fd.StreamType = f.typ
		case "encoding":
			fd.Encoding = f.encoding
		case "context-encoding":
			fd.ContextEncoding = f.contextEncoding
		case "classification":
			fd.Classification = f.classification
		case "description":
			fd.Description = f.description
		}
	})
	if err != nil {
		return err
	}
	// The API refuses these names too: the data viewer could not decode
	// with them, and only a flag given is checked, so that an update of
	// something else does not fail on a name stored earlier.
	for _, e := range []struct{ flag, value string }{{"encoding", f.encoding}, {"context-encoding", f.contextEncoding}} {
		if !visited(fs, e.flag) {
			continue
		}
		if _, _, err := feed.LookupEncoding(e.value); err != nil {
			return fmt.Errorf("--%s: %w; use one of the %s", e.flag, err, feed.EncodingNames)
		}
	}
	if fd.StreamType != "" && types != nil {
		for _, t := range types {
			if strings.EqualFold(t, fd.StreamType) {
				fd.StreamType = t
				return nil
			}
		}
		return fmt.Errorf("stream type %q is not one of receive.metaTypes: %s", fd.StreamType, strings.Join(types, ", "))
	}
	return nil
}

// visited reports whether the flag name was given.
func visited(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(fl *flag.Flag) { found = found || fl.Name == name })
	return found
}

// create creates a feed. Unlike the API's, it may take a name that streams
// of an earlier feed still carry (an administrator's tool), and says so on
// errOut, since whoever is given rights on the feed reaches them.
func (f *feedFlags) create(ctx context.Context, repo *meta.Repo, cfg config.Config, name string, fs *flag.FlagSet, out, errOut io.Writer) error {
	if err := feed.ValidateName(cfg.FeedNameRegexp(), name); err != nil {
		return err
	}
	fd := feed.Feed{Name: name}
	if err := f.apply(&fd, fs, cfg.Receive.MetaTypes); err != nil {
		return err
	}
	fd = fd.WithDefaults()
	if err := repo.CreateFeed(ctx, fd); err != nil {
		if errors.Is(err, meta.ErrExists) {
			return fmt.Errorf("a feed named %q already exists", name)
		}
		return err
	}
	fmt.Fprintf(out, "created feed %s (status %s, type %s)\n", fd.Name, fd.Status, fd.StreamType)
	has, err := repo.FeedNameHasStreams(ctx, name)
	if err != nil {
		return fmt.Errorf("feed %s created, but: %w", name, err)
	}
	if has {
		fmt.Fprintf(errOut, "note: streams of an earlier feed named %s exist (deleted or not) and are now this feed's: "+
			"whoever is given permissions on %s reaches them\n", name, name)
	}
	return nil
}

func (f *feedFlags) update(ctx context.Context, repo *meta.Repo, name string, fs *flag.FlagSet, out io.Writer) error {
	fd, err := repo.GetFeed(ctx, name)
	if err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return fmt.Errorf("no feed named %q", name)
		}
		return err
	}
	if err := f.apply(&fd, fs, nil); err != nil {
		return err
	}
	if err := repo.UpdateFeed(ctx, fd); err != nil {
		return err
	}
	fmt.Fprintf(out, "updated feed %s (status %s, type %s)\n", fd.Name, fd.Status, fd.StreamType)
	return nil
}

func listFeeds(ctx context.Context, repo *meta.Repo, asJSON bool, out io.Writer) error {
	feeds, err := repo.ListFeeds(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(out)
		for _, f := range feeds {
			if err := enc.Encode(f); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATUS\tTYPE\tENCODING\tCLASSIFICATION\tDESCRIPTION")
	for _, f := range feeds {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Name, f.Status, f.StreamType, f.Encoding, f.Classification, f.Description)
	}
	return tw.Flush()
}

type streamFlags struct {
	feed, status, child, receipt string
	json                         bool
	part                         int
}

// streamJSON is one line of `stream list --json`.
type streamJSON struct {
	ID            int64     `json:"id"`
	Feed          string    `json:"feed"`
	Type          string    `json:"type"`
	Status        string    `json:"status"`
	CreateTime    string    `json:"createTime"`
	EffectiveTime string    `json:"effectiveTime"`
	StatusTime    string    `json:"statusTime"`
	ReceiptID     string    `json:"receiptId"`
	Node          string    `json:"node"`
	Parts         int       `json:"parts"`
	RawSize       int64     `json:"rawSize"`
	FileSize      int64     `json:"fileSize"`
	Attributes    *attr.Map `json:"attributes"`
}

func ms(v int64) string {
	if v == 0 {
		return ""
	}
	return attr.FormatTime(time.UnixMilli(v))
}

func (sf *streamFlags) list(ctx context.Context, repo *meta.Repo, out io.Writer) error {
	filter := meta.StreamFilter{Feed: sf.feed, Status: meta.Status(strings.ToUpper(sf.status)), AnyReceiptID: sf.receipt, Limit: 1000}
	enc := json.NewEncoder(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if !sf.json {
		fmt.Fprintln(tw, "ID\tFEED\tTYPE\tSTATUS\tCREATED\tPARTS\tSIZE\tRECEIPT")
	}
	// Page through by id so that a large store lists in bounded memory.
	for {
		streams, err := repo.ListStreams(ctx, filter)
		if err != nil {
			return err
		}
		for _, s := range streams {
			if sf.json {
				if err := enc.Encode(streamJSON{
					ID: s.ID, Feed: s.Feed, Type: s.Type, Status: string(s.Status),
					CreateTime: ms(s.CreateMs), EffectiveTime: attr.FormatTime(time.UnixMilli(s.EffectiveMs)), StatusTime: ms(s.StatusMs),
					ReceiptID: s.ReceiptID, Node: s.Node, Parts: s.Parts, RawSize: s.RawSize,
					FileSize: s.FileSize, Attributes: s.Attributes,
				}); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", s.ID, s.Feed, s.Type, s.Status, ms(s.CreateMs), s.Parts, s.RawSize, s.ReceiptID)
		}
		if len(streams) < filter.Limit {
			break
		}
		filter.AfterID = streams[len(streams)-1].ID
	}
	if sf.json {
		return nil
	}
	return tw.Flush()
}

func (sf *streamFlags) cat(ctx context.Context, st *app.Open, id int64, out io.Writer) error {
	ch := streamfile.Data
	switch strings.ToLower(sf.child) {
	case "":
	case "context":
		ch = streamfile.Context
	case "meta data", "meta":
		ch = streamfile.Meta
	default:
		return usagef(`--child must be Context or "Meta Data", not %q`, sf.child)
	}
	r, err := st.Store.Open(ctx, id)
	if err != nil {
		return err
	}
	defer r.Close()
	first, last := 0, r.Parts()-1
	if sf.part != 0 {
		if sf.part < 1 || sf.part > r.Parts() {
			return fmt.Errorf("stream %d has %d part(s); --part must be between 1 and %d", id, r.Parts(), r.Parts())
		}
		first, last = sf.part-1, sf.part-1
	}
	for part := first; part <= last; part++ {
		if !r.Has(ch, part) {
			if sf.part != 0 {
				return fmt.Errorf("part %d of stream %d has no %s", sf.part, id, ch)
			}
			continue
		}
		sec, err := r.Section(ch, part)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, sec); err != nil {
			return fmt.Errorf("stream %d part %d: %w", id, part+1, err)
		}
	}
	return nil
}
