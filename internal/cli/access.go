package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
)

// accessFlags holds the flags of the api-key, user and group commands.
type accessFlags struct {
	user, name, comments, expires, displayName string
	group, json                                bool
}

// accessArgs names the positional arguments each command takes (for the
// usage error); ok is false for an unknown command.
func accessArgs(cmd string) (args []string, ok bool) {
	switch cmd {
	case "api-key create", "api-key list", "user list":
		return nil, true
	case "api-key disable", "api-key enable", "api-key delete":
		return []string{"ID"}, true
	case "user create", "user show", "user disable", "user enable":
		return []string{"NAME"}, true
	case "user grant", "user revoke":
		return []string{"NAME", "PERMISSION"}, true
	case "user feed":
		return []string{"NAME", "FEED", "LEVEL"}, true
	case "group add", "group remove":
		return []string{"NAME", "MEMBER"}, true
	}
	return nil, false
}

// adminAccess runs `weir admin api-key|user|group ...`: the offline
// management of API callers, which also works before anyone can sign in to
// the API (and so is how a locked-out installation is repaired).
func adminAccess(subject, action string, args []string, stdout, stderr io.Writer) error {
	cmd := subject + " " + action
	want, ok := accessArgs(cmd)
	if !ok {
		return usagef("unknown admin command %q", cmd)
	}
	fs := flag.NewFlagSet("admin "+cmd, flag.ContinueOnError)
	var c common
	c.register(fs, false)
	var f accessFlags
	switch cmd {
	case "api-key create":
		fs.StringVar(&f.user, "user", "", "the user the key authenticates as (required)")
		fs.StringVar(&f.name, "name", "", "a name for the key, unique for the user (default: its prefix)")
		fs.StringVar(&f.comments, "comments", "", "free text, e.g. where the key is used")
		fs.StringVar(&f.expires, "expires", "", `lifetime: days ("90d"), a Go duration ("720h") or ISO-8601 ("P90D"); default and maximum: security.apiKeys.maxExpiry`)
	case "api-key list":
		fs.StringVar(&f.user, "user", "", "only this user's keys")
		fs.BoolVar(&f.json, "json", false, "one JSON object per line")
	case "user create":
		fs.StringVar(&f.displayName, "display-name", "", "name shown for the user (default: NAME)")
		fs.BoolVar(&f.group, "group", false, "create a group rather than a user")
	case "user list":
		fs.BoolVar(&f.json, "json", false, "one JSON object per line")
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != len(want) {
		if len(want) == 0 {
			return usagef("%s takes no arguments, got %q", cmd, pos)
		}
		return usagef("%s takes %s", cmd, strings.Join(want, " "))
	}
	if cmd == "api-key create" && f.user == "" {
		return usagef("api-key create needs --user NAME")
	}
	cfg, st, err := c.openStorage(fs, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	ctx := context.Background()
	a := accessCmd{
		svc:  access.New(st.Repo, time.Duration(cfg.Security.APIKeys.MaxExpiry), nil),
		repo: st.Repo, out: stdout, errOut: stderr, flags: f,
	}
	return a.run(ctx, cmd, pos)
}

// accessCmd runs one parsed command.
type accessCmd struct {
	svc         *access.Service
	repo        *meta.Repo
	out, errOut io.Writer
	flags       accessFlags
}

func (a *accessCmd) run(ctx context.Context, cmd string, pos []string) error {
	switch cmd {
	case "api-key create":
		return a.createKey(ctx)
	case "api-key list":
		return a.listKeys(ctx)
	case "api-key disable", "api-key enable", "api-key delete":
		id, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil || id <= 0 {
			return usagef("API key id %q is not a positive number (see `weir admin api-key list`)", pos[0])
		}
		return a.changeKey(ctx, cmd[len("api-key "):], id)
	case "user create":
		u, err := a.svc.CreateUser(ctx, pos[0], a.flags.displayName, a.flags.group)
		if err != nil {
			return err
		}
		fmt.Fprintf(a.out, "created %s %s\n", userKind(u), u.Name)
		return nil
	case "user list":
		return a.listUsers(ctx)
	case "user show":
		return a.showUser(ctx, pos[0])
	case "user disable", "user enable":
		enable := cmd == "user enable"
		if err := a.svc.SetEnabled(ctx, pos[0], enable); err != nil {
			return err
		}
		fmt.Fprintf(a.out, "%sd %s\n", cmd[len("user "):], pos[0])
		return nil
	case "user grant", "user revoke":
		perm, err := access.ParsePermission(pos[1])
		if err != nil {
			return err
		}
		if cmd == "user grant" {
			if err := a.svc.GrantApp(ctx, pos[0], perm); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "granted %q to %s\n", perm, pos[0])
			return nil
		}
		if err := a.svc.RevokeApp(ctx, pos[0], perm); err != nil {
			return err
		}
		fmt.Fprintf(a.out, "revoked %q from %s (any held through groups remains)\n", perm, pos[0])
		return nil
	case "user feed":
		return a.setFeed(ctx, pos[0], pos[1], pos[2])
	case "group add":
		if err := a.svc.AddMember(ctx, pos[0], pos[1]); err != nil {
			return err
		}
		fmt.Fprintf(a.out, "%s is a member of %s\n", pos[1], pos[0])
		return nil
	default: // group remove
		if err := a.svc.RemoveMember(ctx, pos[0], pos[1]); err != nil {
			return err
		}
		fmt.Fprintf(a.out, "%s is not a member of %s\n", pos[1], pos[0])
		return nil
	}
}

func userKind(u meta.User) string {
	if u.Group {
		return "group"
	}
	return "user"
}

// createKey prints the new key alone on the first line of stdout, so that a
// script can capture it, and everything else on stderr. It is the only time
// the key is shown: only its hash is stored.
func (a *accessCmd) createKey(ctx context.Context) error {
	nk := access.NewKey{Owner: a.flags.user, Name: a.flags.name, Comments: a.flags.comments}
	if a.flags.expires != "" {
		d, err := config.ParseDuration(a.flags.expires)
		if err != nil {
			return fmt.Errorf("--expires: %w", err)
		}
		if d <= 0 {
			return fmt.Errorf("--expires must be positive, got %q", a.flags.expires)
		}
		nk.Expires = time.Now().Add(time.Duration(d))
	}
	plain, k, err := a.svc.CreateAPIKey(ctx, nk)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(a.out, plain); err != nil {
		return fmt.Errorf("print api key: %w", err)
	}
	fmt.Fprintf(a.errOut, "created API key %d %q (%s...) for %s, expiring %s.\nIt is shown only this once: store it now. Send it as `Authorization: Bearer <key>`.\n",
		k.ID, k.Name, k.Prefix, k.Owner, ms(k.ExpiresMs))
	return nil
}

// apiKeyJSON is one line of `api-key list --json`. It has no hash: the hash is
// as good as the key for finding it and is of no use to a reader.
type apiKeyJSON struct {
	ID           int64  `json:"id"`
	Owner        string `json:"owner"`
	Name         string `json:"name"`
	Prefix       string `json:"prefix"`
	Comments     string `json:"comments"`
	Enabled      bool   `json:"enabled"`
	Expired      bool   `json:"expired"`
	ExpireTime   string `json:"expireTime"`
	LastUsedTime string `json:"lastUsedTime"`
	CreateTime   string `json:"createTime"`
}

func (a *accessCmd) listKeys(ctx context.Context) error {
	keys, err := a.svc.ListAPIKeys(ctx, a.flags.user)
	if err != nil {
		return err
	}
	now := time.Now().UnixMilli()
	if a.flags.json {
		enc := json.NewEncoder(a.out)
		for _, k := range keys {
			if err := enc.Encode(apiKeyJSON{ID: k.ID, Owner: k.Owner, Name: k.Name, Prefix: k.Prefix,
				Comments: k.Comments, Enabled: k.Enabled, Expired: now >= k.ExpiresMs,
				ExpireTime: ms(k.ExpiresMs), LastUsedTime: ms(k.LastUsedMs), CreateTime: ms(k.CreateMs)}); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tOWNER\tNAME\tPREFIX\tSTATE\tEXPIRES\tLAST USED\tCOMMENTS")
	for _, k := range keys {
		state := "enabled"
		switch {
		case !k.Enabled:
			state = "disabled"
		case now >= k.ExpiresMs:
			state = "expired"
		}
		last := ms(k.LastUsedMs)
		if last == "" {
			last = "never"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Owner, k.Name, k.Prefix, state, ms(k.ExpiresMs), last, k.Comments)
	}
	return tw.Flush()
}

func (a *accessCmd) changeKey(ctx context.Context, verb string, id int64) error {
	var err error
	switch verb {
	case "disable":
		err = a.svc.SetAPIKeyEnabled(ctx, id, false)
	case "enable":
		err = a.svc.SetAPIKeyEnabled(ctx, id, true)
	default:
		err = a.svc.DeleteAPIKey(ctx, id)
	}
	if errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("no API key with id %d (see `weir admin api-key list`)", id)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "%sd API key %d\n", verb, id)
	return nil
}

// accessUserJSON is one line of `user list --json`.
type accessUserJSON struct {
	Name        string `json:"name"`
	DisplayName string `json:"displayName"`
	Group       bool   `json:"group"`
	Enabled     bool   `json:"enabled"`
	CreateTime  string `json:"createTime"`
	UpdateTime  string `json:"updateTime"`
}

func (a *accessCmd) listUsers(ctx context.Context) error {
	users, err := a.svc.ListUsers(ctx)
	if err != nil {
		return err
	}
	if a.flags.json {
		enc := json.NewEncoder(a.out)
		for _, u := range users {
			if err := enc.Encode(accessUserJSON{Name: u.Name, DisplayName: u.DisplayName, Group: u.Group,
				Enabled: u.Enabled, CreateTime: ms(u.CreateMs), UpdateTime: ms(u.UpdateMs)}); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTYPE\tSTATE\tDISPLAY NAME")
	for _, u := range users {
		state := "enabled"
		if !u.Enabled {
			state = "disabled"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", u.Name, userKind(u), state, u.DisplayName)
	}
	return tw.Flush()
}

// showUser prints what a user or group holds directly, the groups it holds
// more through, and (for an enabled user) the effective result.
func (a *accessCmd) showUser(ctx context.Context, name string) error {
	u, err := a.svc.GetUser(ctx, name)
	if err != nil {
		return err
	}
	direct, err := a.svc.DirectGrants(ctx, name)
	if err != nil {
		return err
	}
	groups, err := a.svc.Groups(ctx, name)
	if err != nil {
		return err
	}
	state := "enabled"
	if !u.Enabled {
		state = "disabled"
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n%s:\t%s (%s)\n", u.Name, userKind(u), u.DisplayName, state)
	if u.Group {
		members, err := a.svc.Members(ctx, name)
		if err != nil {
			return err
		}
		var names []string
		for _, m := range members {
			names = append(names, m.Name)
		}
		fmt.Fprintf(tw, "members:\t%s\n", strings.Join(names, ", "))
	}
	var gs []string
	for _, g := range groups {
		gs = append(gs, g.Name)
	}
	fmt.Fprintf(tw, "member of (with groups above):\t%s\n", strings.Join(gs, ", "))
	fmt.Fprintf(tw, "permissions held directly:\t%s\n", strings.Join(direct.Permissions, ", "))
	fmt.Fprintf(tw, "feeds held directly:\t%s\n", feedLevelList(direct.Feeds))
	if !u.Group && u.Enabled {
		p, err := a.svc.PrincipalFor(ctx, name)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "effective permissions:\t%s\n", strings.Join(p.Permissions(), ", "))
		if all, feeds := p.Feeds(access.Use); all {
			fmt.Fprintf(tw, "effective feeds:\tOWNER on every feed (Administrator)\n")
		} else {
			eff := map[string]access.Level{}
			for _, f := range feeds {
				eff[f] = p.FeedLevel(f)
			}
			fmt.Fprintf(tw, "effective feeds:\t%s\n", feedLevelList(eff))
		}
	}
	return tw.Flush()
}

// feedLevelList formats feed levels as "FEED=LEVEL, ..." in feed order.
func feedLevelList(m map[string]access.Level) string {
	names := make([]string, 0, len(m))
	for f := range m {
		names = append(names, f)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, f := range names {
		parts[i] = f + "=" + m[f].String()
	}
	return strings.Join(parts, ", ")
}

func (a *accessCmd) setFeed(ctx context.Context, name, feedName, levelName string) error {
	level, err := access.ParseLevel(levelName)
	if err != nil {
		return err
	}
	if err := a.svc.SetFeedLevel(ctx, name, feedName, level); err != nil {
		return err
	}
	if level == access.None {
		fmt.Fprintf(a.out, "%s holds nothing directly on feed %s\n", name, feedName)
	} else {
		fmt.Fprintf(a.out, "%s holds %s on feed %s\n", name, level, feedName)
	}
	// Granting on a feed that does not exist yet is allowed (it may be
	// created by its first post), but is more often a typo: say so.
	if _, err := a.repo.GetFeed(ctx, feedName); errors.Is(err, meta.ErrNotFound) && level != access.None {
		fmt.Fprintf(a.errOut, "note: there is no feed named %q yet; the permission applies once it exists\n", feedName)
	}
	return nil
}
