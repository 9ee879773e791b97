package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/auth/datafeedkey"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
)

// dataFeedKeyUsage is the synopsis of these commands, repeated in their
// usage errors because the general usage text does not list them.
const dataFeedKeyUsage = `usage:
  weir admin datafeed-key create --account ID [--expires DURATION] [--attr K=V ...]
  weir admin datafeed-key list [--account ID] [--json]
  weir admin datafeed-key revoke ID`

// dfkDefaultLifetime is the lifetime of a key created without --expires.
const dfkDefaultLifetime = "365d"

func dataFeedKeyUsagef(format string, a ...any) error {
	return usagef("%s\n%s", fmt.Sprintf(format, a...), dataFeedKeyUsage)
}

// dfkFlags holds the flags of the datafeed-key commands.
type dfkFlags struct {
	account, expires string
	attrs            dfkAttrFlag
	json             bool
}

// dfkAttrFlag collects repeated --attr K=V flags.
type dfkAttrFlag []string

func (a *dfkAttrFlag) String() string     { return strings.Join(*a, ",") }
func (a *dfkAttrFlag) Set(v string) error { *a = append(*a, v); return nil }

// adminDataFeedKey runs `weir admin datafeed-key create|list|revoke`.
func adminDataFeedKey(action string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("admin datafeed-key "+action, flag.ContinueOnError)
	var c common
	c.register(fs, false)
	var f dfkFlags
	switch action {
	case "create":
		fs.StringVar(&f.account, "account", "", "the owner the key belongs to: senders name it in the owner header (AccountId)")
		fs.StringVar(&f.expires, "expires", dfkDefaultLifetime, `lifetime: days ("90d"), a Go duration ("720h") or ISO-8601 ("P90D")`)
		fs.Var(&f.attrs, "attr", "K=V attribute applied to every stream sent with the key (repeatable)")
	case "list":
		fs.StringVar(&f.account, "account", "", "only keys of this account")
		fs.BoolVar(&f.json, "json", false, "one JSON object per line")
	case "revoke":
	default:
		return dataFeedKeyUsagef("unknown admin command %q", "datafeed-key "+action)
	}
	pos, err := parse(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return dataFeedKeyUsagef("%v", err)
	}

	// Check the arguments before opening anything.
	var (
		lifetime time.Duration
		attrs    *attr.Map
		id       int64
	)
	switch action {
	case "create":
		if len(pos) != 0 {
			return dataFeedKeyUsagef("datafeed-key create takes no arguments, got %q", pos)
		}
		f.account = strings.TrimSpace(f.account)
		if f.account == "" {
			return dataFeedKeyUsagef("datafeed-key create needs --account ID")
		}
		if lifetime, err = parseKeyLifetime(f.expires); err != nil {
			return dataFeedKeyUsagef("--expires: %v", err)
		}
	case "list":
		if len(pos) != 0 {
			return dataFeedKeyUsagef("datafeed-key list takes no arguments, got %q", pos)
		}
	case "revoke":
		if len(pos) != 1 {
			return dataFeedKeyUsagef("datafeed-key revoke takes one key id (see datafeed-key list)")
		}
		id, err = strconv.ParseInt(pos[0], 10, 64)
		if err != nil || id <= 0 {
			return dataFeedKeyUsagef("key id %q is not a positive number", pos[0])
		}
	}
	cfg, st, err := c.openStorage(fs, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	if action == "create" {
		if attrs, err = parseKeyAttrs(f.attrs, cfg.Receive.DataFeedOwnerMetaKey); err != nil {
			return dataFeedKeyUsagef("%v", err)
		}
	}
	ctx := context.Background()
	switch action {
	case "create":
		return createDataFeedKey(ctx, st.Repo, f.account, lifetime, attrs, cfg.Receive.DataFeedOwnerMetaKey, time.Now(), stdout, stderr)
	case "list":
		return listDataFeedKeys(ctx, st.Repo, f.account, f.json, time.Now(), stdout)
	default:
		return revokeDataFeedKey(ctx, st.Repo, id, stdout)
	}
}

// parseKeyLifetime accepts every form config.ParseDuration does (90d,
// 720h, P90D). The lifetime must be positive.
func parseKeyLifetime(s string) (time.Duration, error) {
	d, err := config.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q: the lifetime must be positive", strings.TrimSpace(s))
	}
	return d.D(), nil
}

// parseKeyAttrs turns K=V flags into attributes. The owner header is refused:
// it is the account, set with --account, and a key cannot speak for another.
func parseKeyAttrs(kvs []string, ownerHeader string) (*attr.Map, error) {
	m := new(attr.Map)
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("--attr %q: want KEY=VALUE", kv)
		}
		if attr.EqualName(k, ownerHeader) {
			return nil, fmt.Errorf("--attr %q: the owner header %s is the key's account; set it with --account", kv, ownerHeader)
		}
		if _, dup := m.Get(k); dup {
			return nil, fmt.Errorf("--attr %q: attribute %s given twice", kv, k)
		}
		m.Put(k, v)
	}
	return m, nil
}

// createDataFeedKey makes a key and stores its hash. The key itself goes to
// stdout alone on one line, so that a script can take it with $(...); the
// details go to stderr. It is never stored or shown again.
func createDataFeedKey(ctx context.Context, repo *meta.Repo, account string, lifetime time.Duration,
	attrs *attr.Map, ownerHeader string, now time.Time, stdout, stderr io.Writer) error {
	am := make(map[string]string, attrs.Len())
	for k, v := range attrs.All() {
		am[k] = v
	}
	// The same function the API creates keys with, so both make the same keys.
	key, k, err := datafeedkey.Create(ctx, repo, datafeedkey.NewKey{
		Account: account, Expires: now.Add(lifetime), Attributes: am, OwnerHeader: ownerHeader, Now: now})
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(stdout, key); err != nil {
		return fmt.Errorf("print the new key: %w (key %d was stored; revoke it and create another)", err, k.ID)
	}
	fmt.Fprintf(stderr, "created data feed key %d for account %s (hint %s), expires %s\n"+
		"the key above is shown only this once: senders put it in the Authorization header and %s in the %s header\n",
		k.ID, k.Account, k.Hint, ms(k.ExpiresMs), k.Account, ownerHeader)
	return nil
}

// dataFeedKeyJSON is one line of `datafeed-key list --json`. It has no
// hash: a listing must not help anyone test guesses offline.
type dataFeedKeyJSON struct {
	ID          int64     `json:"id"`
	Account     string    `json:"account"`
	Hint        string    `json:"hint"`
	Algorithm   string    `json:"algorithm"`
	Status      string    `json:"status"`
	CreateTime  string    `json:"createTime"`
	ExpireTime  string    `json:"expireTime"` // as the API and api-key list name it (before: expiryTime)
	RevokedTime string    `json:"revokedTime,omitempty"`
	Attributes  *attr.Map `json:"attributes"`
}

// dfkStatus says whether a key can be used now.
func dfkStatus(k meta.DataFeedKey, now time.Time) string {
	switch {
	case k.RevokedMs != 0:
		return "revoked"
	case now.UnixMilli() >= k.ExpiresMs:
		return "expired"
	}
	return "active"
}

func listDataFeedKeys(ctx context.Context, repo *meta.Repo, account string, asJSON bool, now time.Time, out io.Writer) error {
	keys, err := repo.ListDataFeedKeys(ctx, strings.TrimSpace(account))
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(out)
		for _, k := range keys {
			if err := enc.Encode(dataFeedKeyJSON{
				ID: k.ID, Account: k.Account, Hint: k.Hint, Algorithm: k.Algorithm, Status: dfkStatus(k, now),
				CreateTime: ms(k.CreateMs), ExpireTime: ms(k.ExpiresMs), RevokedTime: ms(k.RevokedMs),
				Attributes: k.Attributes,
			}); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tACCOUNT\tHINT\tSTATUS\tCREATED\tEXPIRES\tREVOKED\tATTRIBUTES")
	for _, k := range keys {
		var kvs []string
		for _, kv := range k.Attributes.Sorted() {
			kvs = append(kvs, kv.Key+"="+kv.Value)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Account, k.Hint, dfkStatus(k, now),
			ms(k.CreateMs), ms(k.ExpiresMs), ms(k.RevokedMs), strings.Join(kvs, ","))
	}
	return tw.Flush()
}

// revokeDataFeedKey revokes a key. Running servers re-read a key's row on
// every use, so it stops working at once.
func revokeDataFeedKey(ctx context.Context, repo *meta.Repo, id int64, out io.Writer) error {
	k, err := repo.GetDataFeedKey(ctx, id)
	if errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("no data feed key with id %d", id)
	}
	if err != nil {
		return err
	}
	if k.RevokedMs != 0 {
		fmt.Fprintf(out, "data feed key %d (account %s, hint %s) was already revoked at %s\n", k.ID, k.Account, k.Hint, ms(k.RevokedMs))
		return nil
	}
	if err := repo.RevokeDataFeedKey(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(out, "revoked data feed key %d (account %s, hint %s)\n", k.ID, k.Account, k.Hint)
	return nil
}
