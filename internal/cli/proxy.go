package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weirhq/weir/internal/app"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
)

// proxyFlags are the flags of `weir proxy` and its tools.
type proxyFlags struct {
	common
	proxyID  string
	forwards multiFlag
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func (p *proxyFlags) register(fs *flag.FlagSet, server bool) {
	fs.StringVar(&p.config, "config", "", "YAML configuration file")
	fs.StringVar(&p.data, "data", "", "data directory (default ./weir-proxy-data)")
	fs.StringVar(&p.db, "db", "", "metadata database: empty for SQLite in the data directory, or a postgres:// URL")
	if server {
		fs.StringVar(&p.listen, "listen", "", "address to listen on (default 127.0.0.1:8090)")
		fs.StringVar(&p.proxyID, "proxy-id", "", "proxy id used in receipt ids (default: generated once and kept in the data directory)")
		fs.Var(&p.forwards, "forward", "downstream datafeed URL to forward to (repeatable; default settings)")
		p.profiles.register(fs)
	}
}

func (p *proxyFlags) load(fs *flag.FlagSet) (config.Proxy, error) {
	cfg := config.DefaultProxy()
	if p.config != "" {
		var err error
		if cfg, err = config.LoadProxy(p.config); err != nil {
			return cfg, err
		}
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "data":
			cfg.Data = p.data
		case "db":
			cfg.DB = p.db
		case "listen":
			cfg.Listen = p.listen
		case "proxy-id":
			cfg.ProxyID = p.proxyID
		}
	})
	for _, u := range p.forwards {
		cfg.AddForward(u)
	}
	return cfg, nil
}

func proxyCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return proxyTool(args[0], args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	var p proxyFlags
	p.register(fs, true)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("proxy takes no arguments, got %q", pos)
	}
	cfg, err := p.load(fs)
	if err != nil {
		return err
	}
	if err := cfg.ValidateProxy(); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", config.AtLines(p.config, err, flagOptions(fs)...))
	}
	return runServer(cfg.Log, p.profiles, stderr, func(ctx context.Context, log *slog.Logger) (*app.App, error) {
		return app.NewProxy(ctx, cfg, log)
	})
}

// proxyTool runs the inspect and replay tools on a proxy's repository;
// they are safe beside a running proxy, which picks replayed items up
// within seconds.
func proxyTool(tool string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("proxy "+tool, flag.ContinueOnError)
	var p proxyFlags
	p.register(fs, false)
	var dest, state string
	var asJSON, all bool
	switch tool {
	case "queue":
		fs.StringVar(&dest, "destination", "", "only this destination")
		fs.StringVar(&state, "state", "", "only queued, retrying or failed items")
		fs.BoolVar(&asJSON, "json", false, "one JSON object per line")
	case "show":
		fs.StringVar(&dest, "destination", "", "only this destination")
	case "replay":
		fs.StringVar(&dest, "destination", "", "the destination whose failed items go back to its queue (required)")
		fs.BoolVar(&all, "all", false, "every failed item of the destination")
	default:
		return usagef("unknown proxy tool %q", tool)
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	cfg, err := p.load(fs)
	if err != nil {
		return err
	}
	log := app.NewLogger(config.Log{Level: "warn", Format: "text"}, stderr)
	ctx := context.Background()
	repo, err := meta.Open(ctx, cfg.DB, cfg.Data, log)
	if err != nil {
		return fmt.Errorf("open the proxy's repository: %w", err)
	}
	defer repo.Close()
	switch tool {
	case "queue":
		return listQueue(ctx, repo, dest, state, asJSON, stdout)
	case "show":
		if len(pos) != 1 {
			return usagef("proxy show takes one aggregate id")
		}
		id, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil {
			return usagef("aggregate id %q is not a number", pos[0])
		}
		return showAggregate(ctx, repo, id, dest, stdout)
	default:
		if dest == "" {
			return usagef("proxy replay needs --destination")
		}
		var ids []int64
		for _, s := range pos {
			id, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return usagef("aggregate id %q is not a number", s)
			}
			ids = append(ids, id)
		}
		if all == (len(ids) > 0) {
			return usagef("proxy replay takes either --all or aggregate ids")
		}
		if err := knownDestination(ctx, repo, dest, configuredDestinations(cfg)); err != nil {
			return err
		}
		n, err := repo.ReplayForwards(ctx, dest, ids, time.Now().UnixMilli())
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d failed item(s) of %s queued again\n", n, dest)
		return nil
	}
}

// configuredDestinations names the destinations of a loaded configuration.
func configuredDestinations(cfg config.Proxy) []string {
	var names []string
	for _, h := range cfg.ForwardHTTPDestinations {
		names = append(names, h.Name)
	}
	for _, f := range cfg.ForwardFileDestinations {
		names = append(names, f.Name)
	}
	return names
}

// knownDestination fails when dest is neither configured nor holds
// anything in the repository, so that a mistyped name is not answered
// with "0 failed items" as if there were simply nothing to replay (and a
// configured destination with an empty queue is not an error: a replay
// run by cron finds nothing to do).
func knownDestination(ctx context.Context, repo *meta.Repo, dest string, configured []string) error {
	if slices.Contains(configured, dest) {
		return nil
	}
	sums, err := repo.SummariseForwards(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, s := range sums {
		if s.Destination == dest {
			return nil
		}
		if !slices.Contains(names, s.Destination) {
			names = append(names, s.Destination)
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("the repository holds no items for destination %q, nor for any other", dest)
	}
	slices.Sort(names)
	return fmt.Errorf("the repository holds no items for destination %q; it holds items for: %s", dest, strings.Join(names, ", "))
}

type queueItem struct {
	Aggregate   int64  `json:"aggregate"`
	Destination string `json:"destination"`
	State       string `json:"state"`
	Feed        string `json:"feed"`
	Type        string `json:"type"`
	Items       int    `json:"items"`
	Bytes       int64  `json:"bytes"`
	Closed      string `json:"closed"`
	Attempts    int    `json:"attempts"`
	Next        string `json:"next,omitempty"`
	LastStatus  int    `json:"lastStatus,omitempty"`
	Error       string `json:"error,omitempty"`
}

func stateOf(f meta.Forward) string { return meta.QueueState(f.State, f.Attempts > 0) }

func listQueue(ctx context.Context, repo *meta.Repo, dest, state string, asJSON bool, out io.Writer) error {
	filter := meta.ForwardFilter{Destination: dest, Limit: 100000}
	switch state {
	case "":
	case "queued":
		filter.State = meta.ForwardQueued
	case "retrying":
		filter.State, filter.Retrying = meta.ForwardQueued, true
	case "failed":
		filter.State = meta.ForwardFailed
	default:
		return usagef("--state %q is not one of queued, retrying, failed", state)
	}
	fs, err := repo.ListForwards(ctx, filter)
	if err != nil {
		return err
	}
	ms := func(v int64) string { return time.UnixMilli(v).UTC().Format(time.RFC3339) }
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if !asJSON {
		fmt.Fprintln(tw, "AGGREGATE\tDESTINATION\tSTATE\tFEED\tTYPE\tITEMS\tBYTES\tCLOSED\tATTEMPTS\tNEXT\tERROR")
	}
	enc := json.NewEncoder(out)
	for _, f := range fs {
		st := stateOf(f)
		if state == "queued" && st != "queued" {
			continue
		}
		it := queueItem{Aggregate: f.ID, Destination: f.Destination, State: st, Feed: f.Feed, Type: f.Type,
			Items: f.Items, Bytes: f.Bytes, Closed: ms(f.CloseMs), Attempts: f.Attempts, LastStatus: f.LastStatus, Error: f.Error}
		if f.State == meta.ForwardQueued {
			it.Next = ms(f.NextMs)
		}
		if asJSON {
			if err := enc.Encode(it); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%d\t%s\t%s\n", it.Aggregate, it.Destination, it.State, it.Feed,
			it.Type, it.Items, it.Bytes, it.Closed, it.Attempts, it.Next, it.Error)
	}
	if !asJSON {
		return tw.Flush()
	}
	return nil
}

func showAggregate(ctx context.Context, repo *meta.Repo, id int64, dest string, out io.Writer) error {
	fs, err := repo.ListForwards(ctx, meta.ForwardFilter{Destination: dest, Limit: 100000})
	if err != nil {
		return err
	}
	found := false
	for _, f := range fs {
		if f.ID != id {
			continue
		}
		found = true
		fmt.Fprintf(out, "aggregate %d for %s: %s, feed %s, type %q, %d item(s), %d bytes, guid %s, %d attempt(s)\n",
			f.ID, f.Destination, stateOf(f), f.Feed, f.Type, f.Items, f.Bytes, f.GUID, f.Attempts)
		if f.ErrorLog != "" {
			fmt.Fprintf(out, "error log:\n%s", f.ErrorLog)
		}
	}
	if !found {
		return fmt.Errorf("aggregate %d waits for no destination (already forwarded, or unknown)", id)
	}
	streams, err := repo.AggregateStreams(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "streams:")
	for _, s := range streams {
		fmt.Fprintf(out, "  %d  receipt %s  guid %s  %d part(s)  %d bytes\n", s.ID, s.ReceiptID, s.Attributes.Value("GUID"), s.Parts, s.RawSize)
	}
	return nil
}
