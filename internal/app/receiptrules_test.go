package app_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/feed"
	"github.com/weirhq/weir/internal/streamfile"
)

// rulesDoc is the API's view of the receipt rules.
type rulesDoc struct {
	Rules      []json.RawMessage `json:"rules"`
	Version    int64             `json:"version"`
	UpdateUser string            `json:"updateUser"`
	InEffect   bool              `json:"inEffect"`
}

// teamRules lets alice post only to TEAM-A feeds, drops every *-NOISE feed
// for everyone, lets bob post anywhere, and has a disabled catch-all that
// must not take part.
const teamRules = `[
  {"name": "drop noise", "action": "DROP",
   "expression": {"type": "term", "field": "Feed", "condition": "EQUALS", "value": "*-NOISE"}},
  {"name": "alice to team A", "action": "RECEIVE",
   "expression": {"type": "operator", "op": "AND", "children": [
     {"type": "term", "field": "UploadUserId", "condition": "EQUALS", "value": "alice"},
     {"type": "term", "field": "feed", "condition": "STARTS_WITH", "value": "TEAM-A"}]}},
  {"name": "alice elsewhere", "action": "REJECT",
   "expression": {"type": "term", "field": "uploaduserid", "condition": "EQUALS", "value": "alice"}},
  {"name": "everyone (off)", "action": "RECEIVE", "enabled": false},
  {"name": "bob", "action": "RECEIVE",
   "expression": {"type": "term", "field": "UploadUserId", "condition": "IN", "value": "bob, carol"}}
]`

// TestReceiptRules: in RECEIPT_POLICY mode the data receipt rules decide
// who may post to which feed: no rules refuse everything (113); the first
// enabled matching rule decides (RECEIVE, REJECT with its number and name,
// DROP with a receipt id and nothing stored); a received post records its
// rule as DataReceiptRule and needs its feed (101); zip parts are decided
// one by one; the rules change through the API (Manage Data Receipt Rules,
// version-checked, validated with the place of the mistake) and take
// effect on the next post.
func TestReceiptRules(t *testing.T) {
	t.Parallel()
	s := authStart(t, []string{"TOKEN"}, func(c *config.Config) {
		c.Receive.ReceiptCheckMode = config.ReceiptPolicy
	})
	for _, f := range []string{"TEAM-A-LOGS", "TEAM-B-LOGS"} {
		s.CreateFeed(f, "", "")
	}
	s.CreateFeed("TEAM-A-REJECTING", feed.Reject, "")
	alice := user(t, s, "alice", nil, nil)
	bob := user(t, s, "bob", nil, nil)
	ruler := user(t, s, "ruler", []string{access.ManageReceiptRules}, nil)
	sendAs := func(c apiClient, feedName, body string, hdr ...string) *resp {
		t.Helper()
		return post(t, s, []byte(body), append([]string{"Feed", feedName, "Authorization", "Bearer " + c.key}, hdr...)...)
	}

	// No rules yet: every post is refused, and the API says so.
	sendAs(alice, "TEAM-A-LOGS", "too early").fails(t, http.StatusNotAcceptable, 113, "no data receipt rule accepts this post", "TEAM-A-LOGS")
	var doc rulesDoc
	ruler.do(http.MethodGet, "/receiptRules", "").want(t, "get empty rules", http.StatusOK, &doc)
	if len(doc.Rules) != 0 || doc.Version != 0 || !doc.InEffect {
		t.Fatalf("empty rules: %+v", doc)
	}

	// Only Manage Data Receipt Rules (or Administrator) may read or change them.
	alice.do(http.MethodGet, "/receiptRules", "").want(t, "alice reads the rules", http.StatusForbidden, nil)
	alice.do(http.MethodPut, "/receiptRules", `{"rules": [], "version": 0}`).want(t, "alice changes the rules", http.StatusForbidden, nil)
	alice.do(http.MethodPost, "/receiptRules/decide", `{"attributes": {}}`).want(t, "alice asks for a decision", http.StatusForbidden, nil)
	apiClient{t: t, url: s.URL + "/api"}.do(http.MethodGet, "/receiptRules", "").want(t, "no key", http.StatusUnauthorized, nil)
	admin := user(t, s, "boss", []string{access.Administrator}, nil)
	admin.do(http.MethodGet, "/receiptRules", "").want(t, "an administrator reads the rules", http.StatusOK, nil)

	// A mistake is refused with where it is, and nothing changes.
	bad := ruler.do(http.MethodPut, "/receiptRules", `{"version": 0, "rules": [{"action": "RECEIVE"},
		{"action": "RECEIVE", "expression": {"type": "term", "field": "Feed", "condition": "SOUNDS_LIKE", "value": "x"}}]}`)
	bad.want(t, "invalid rule", http.StatusUnprocessableEntity, nil)
	if !strings.Contains(string(bad.body), "body.rules[1].expression.condition") {
		t.Errorf("invalid rule: %s does not name body.rules[1].expression.condition", bad.body)
	}
	ruler.do(http.MethodPut, "/receiptRules", `{"version": 0, "rules": [{"action": "MAYBE"}]}`).
		want(t, "unknown action", http.StatusUnprocessableEntity, nil)

	ruler.do(http.MethodPut, "/receiptRules", `{"version": 0, "rules": `+teamRules+`}`).want(t, "put rules", http.StatusOK, &doc)
	if len(doc.Rules) != 5 || doc.Version != 1 || doc.UpdateUser != "ruler" {
		t.Fatalf("stored rules: %+v", doc)
	}
	// A client that read version 0 cannot overwrite version 1.
	ruler.do(http.MethodPut, "/receiptRules", `{"version": 0, "rules": []}`).admWantProblem(t, "stale put", http.StatusConflict,
		"the receipt rule set is at version 1, not 0")

	// alice: TEAM-A feeds only, by rule 2; elsewhere rule 3 refuses her.
	id := sendAs(alice, "TEAM-A-LOGS", "alice's own").ok(t)
	st := streamByReceipt(t, s, id)
	if st.Feed != "TEAM-A-LOGS" || st.Attributes.Value("DataReceiptRule") != "2" || st.Attributes.Value("UploadUserId") != "alice" {
		t.Fatalf("alice's stream: feed %s, attributes %v", st.Feed, st.Attributes.Sorted())
	}
	sendAs(alice, "TEAM-B-LOGS", "not hers").fails(t, http.StatusNotAcceptable, 113, `data receipt rule 3 ("alice elsewhere") rejects`, "TEAM-B-LOGS")
	// A header cannot make her someone else: UploadUserId is what weir authenticated.
	sendAs(alice, "TEAM-B-LOGS", "forged", "UploadUserId", "bob").fails(t, http.StatusNotAcceptable, 113, "rule 3")
	// The rules replace feed statuses: a REJECT feed receives, a missing one is 101.
	if r := sendAs(alice, "TEAM-A-REJECTING", "status ignored"); r.code != http.StatusOK {
		t.Fatalf("a REJECT feed under the rules: %d %s", r.code, r.header.Get("Service-Error"))
	}
	sendAs(alice, "TEAM-A-MISSING", "no feed").fails(t, http.StatusNotAcceptable, 101, "TEAM-A-MISSING")

	// DROP: 200 and a receipt id, nothing stored (the feed need not exist).
	before := len(s.Streams())
	sendAs(bob, "ANY-NOISE", "dropped").ok(t)
	if n := len(s.Streams()); n != before {
		t.Fatalf("a dropped post was stored: %d streams, want %d", n, before)
	}
	// bob: rule 5 (rule 4, a catch-all, is disabled).
	id = sendAs(bob, "TEAM-B-LOGS", "bob's").ok(t)
	if got := streamByReceipt(t, s, id).Attributes.Value("DataReceiptRule"); got != "5" {
		t.Errorf("bob's post decided by rule %q, want 5", got)
	}

	// A zip's parts are decided one by one: one part alice may not send
	// refuses the whole post, and nothing of it is stored.
	before = len(s.Streams())
	z := zipOf(t, "001.meta", "Feed:TEAM-A-LOGS\n", "001.dat", "mine\n", "002.meta", "Feed:TEAM-B-LOGS\n", "002.dat", "theirs\n")
	post(t, s, z, "Compression", "ZIP", "Authorization", "Bearer "+alice.key).
		fails(t, http.StatusNotAcceptable, 113, `part "002"`, "rule 3")
	if n := len(s.Streams()); n != before {
		t.Fatalf("a refused zip left streams: %d, want %d", n, before)
	}

	// The decide operation answers as a post would be decided, with the
	// stored rules or with rules sent along.
	var dec struct {
		Rule   int    `json:"rule"`
		Name   string `json:"name"`
		Action string `json:"action"`
	}
	ruler.do(http.MethodPost, "/receiptRules/decide", `{"attributes": {"FEED": "TEAM-B-LOGS", "uploadUserId": "alice"}}`).
		want(t, "decide", http.StatusOK, &dec)
	if dec.Rule != 3 || dec.Action != "REJECT" || dec.Name != "alice elsewhere" {
		t.Errorf("decide: %+v", dec)
	}
	ruler.do(http.MethodPost, "/receiptRules/decide", `{"attributes": {"Feed": "X"}, "rules": [{"action": "DROP"}]}`).
		want(t, "decide with rules sent", http.StatusOK, &dec)
	if dec.Rule != 1 || dec.Action != "DROP" {
		t.Errorf("decide with rules sent: %+v", dec)
	}

	// Each decision is counted by rule and action.
	for series, want := range map[string]float64{
		`weir_receive_rule_decisions_total{action="REJECT",rule="none"}`: 1,
		`weir_receive_rule_decisions_total{action="RECEIVE",rule="5"}`:   1,
		`weir_receive_rule_decisions_total{action="DROP",rule="1"}`:      1,
	} {
		if got := metric(t, s, series); got != want {
			t.Errorf("%s = %g, want %g", series, got, want)
		}
	}

	// A proxy asking about a feed and a sender gets the rules' answer.
	q := func(feedName, user string) string {
		return `{"feedName": "` + feedName + `", "userDesc": {"subjectId": "` + user + `"}}`
	}
	// The answer names no rule: any API key may ask, about any sender.
	if a := wantAnswer(t, s, feedStatusV2, bob.key, q("TEAM-B-LOGS", "alice"), "Reject", 113, "REJECTED_BY_POLICY_RULES"); strings.Contains(a.Message, "alice elsewhere") || strings.Contains(a.Message, "rule 3") {
		t.Errorf("a feed status answer names the rule: %q", a.Message)
	}
	wantAnswer(t, s, feedStatusV2, bob.key, q("TEAM-A-LOGS", "alice"), "Receive", 0, "OK")
	wantAnswer(t, s, feedStatusV2, bob.key, q("X-NOISE", "carol"), "Drop", 0, "OK")

	// A change takes effect on the next post.
	ruler.do(http.MethodPut, "/receiptRules", `{"version": 1, "rules": [{"name": "all", "action": "RECEIVE"}]}`).
		want(t, "open up", http.StatusOK, &doc)
	sendAs(alice, "TEAM-B-LOGS", "now allowed").ok(t)
}

// TestReceiptRulesAdmin: `weir admin receipt-rules set` stores a file of
// rules beside a running server (which uses them within its refresh
// period), refuses an invalid file saying where, and `show` prints what
// `set` takes.
func TestReceiptRulesAdmin(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *config.Config) { c.Receive.ReceiptCheckMode = config.ReceiptPolicy })
	post(t, s, []byte("x"), "Feed", testFeed).fails(t, http.StatusNotAcceptable, 113)

	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`[{"action": "RECEIVE", "expression": {"type": "term", "field": "Feed"}}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut := weirAdminExit(t, s, 1, "receipt-rules", "set", bad); !strings.Contains(errOut, "rules[0].expression.condition") {
		t.Errorf("invalid file: stderr %q does not say where", errOut)
	}

	good := filepath.Join(dir, "rules.json")
	rules := `[{"name": "test feed", "action": "RECEIVE", "expression": {"type": "term", "field": "Feed", "condition": "EQUALS", "value": "` + testFeed + `"}}]`
	if err := os.WriteFile(good, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := weirAdmin(t, s, "receipt-rules", "set", good)
	if !strings.Contains(out, "stored 1 receipt rules (1 enabled) as version 1") {
		t.Errorf("set: %q", out)
	}
	shown, _ := weirAdmin(t, s, "receipt-rules", "show")
	var back []map[string]any
	if err := json.Unmarshal([]byte(shown), &back); err != nil || len(back) != 1 || back[0]["name"] != "test feed" {
		t.Fatalf("show: %v %q", err, shown)
	}
	// The server notices within its refresh period (5 s).
	apptest.WaitFor(t, "the server to use the new rules", func() bool {
		return post(t, s, []byte("x"), "Feed", testFeed).code == http.StatusOK
	})
	post(t, s, []byte("x"), "Feed", "OTHER-FEED").fails(t, http.StatusNotAcceptable, 113, "no data receipt rule accepts")
}

// TestReceiptRulesThroughProxy: a proxy in FEED_STATUS mode refuses, itself,
// what the main service's receipt rules refuse for that feed and sender,
// and the main service decides every part the proxy forwards by the rules
// again, with the identity and attributes the sender had at the proxy (the
// proxy is a trusted forwarder).
func TestReceiptRulesThroughProxy(t *testing.T) {
	t.Parallel()
	const other = "RR-OTHER-FEED"
	main := start(t, func(c *config.Config) {
		c.Receive.AuthenticationRequired = true
		c.Receive.ReceiptCheckMode = config.ReceiptPolicy
		c.Receive.TrustedForwarders = []string{"DATA_FEED_KEY:data-feed-identity-2000"}
	})
	main.CreateFeed(other, "", "")
	// The proxy's senders are not authenticated (UNAUTHENTICATED_USER);
	// account 1000 may post to the test feed only.
	rules := `[
	  {"name": "system B", "action": "REJECT",
	   "expression": {"type": "term", "field": "System", "condition": "EQUALS", "value": "B"}},
	  {"name": "1000 to the test feed", "action": "RECEIVE", "expression": {"type": "operator", "children": [
	    {"type": "term", "field": "AccountId", "condition": "EQUALS", "value": "1000"},
	    {"type": "term", "field": "Feed", "condition": "EQUALS", "value": "` + testFeed + `"}]}},
	  {"name": "1000 elsewhere", "action": "REJECT",
	   "expression": {"type": "term", "field": "AccountId", "condition": "EQUALS", "value": "1000"}}]`
	path := filepath.Join(t.TempDir(), "rules.json")
	if err := os.WriteFile(path, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	weirAdmin(t, main, "receipt-rules", "set", path)
	dfk, _ := dbDataFeedKey(t, main, "2000", time.Now().Add(time.Hour))
	asker := pxAPIKey(t, main, "rules-asker", "Feed Status Asker")
	// The main service rereads its rules within 5 s of `weir admin` setting
	// them; the proxy would cache an answer given before for a minute.
	apptest.WaitFor(t, "the main service to use the rules", func() bool {
		_, _, b := askFeedStatus(t, main, feedStatusV2, asker,
			`{"feedName": "`+testFeed+`", "attributeMap": {"AccountId": "1000", "System": "A"}}`)
		return strings.Contains(string(b), `"status":"Receive"`)
	})
	px := pxProxy(t, "proxy-rules", func(c *config.Proxy) {
		c.Receive.ReceiptCheckMode = config.FeedStatus
		c.FeedStatus.APIKey = asker
		c.ForwardHTTPDestinations[0].DataFeedKey = dfk
		c.ForwardHTTPDestinations[0].DataFeedKeyOwner = "2000"
	}, main.URL+"/datafeed")

	post(t, px, []byte("allowed\n"), "Feed", testFeed, "AccountId", "1000", "System", "A").accepted(t)
	r := post(t, px, []byte("refused at the proxy\n"), "Feed", other, "AccountId", "1000", "System", "A")
	r.fails(t, http.StatusNotAcceptable, 113)
	if msg := r.header.Get("Service-Error"); strings.Contains(msg, "1000 elsewhere") || strings.Contains(msg, "rule 3") {
		t.Errorf("the proxy's answer names the main service's rule: %q", msg)
	}
	// The proxy's answer for this feed and sender is cached, so a post the
	// rules refuse for another attribute is accepted at the proxy; the main
	// service drops that part and stores the rest of the aggregate.
	post(t, px, []byte("refused at the main service\n"), "Feed", testFeed, "AccountId", "1000", "System", "B").accepted(t)
	pxWaitDrained(t, px) // every aggregate delivered: none refused as a whole
	parts := pxFeedParts(t, main, testFeed)
	if len(parts) != 1 || string(parts[0].data) != "allowed\n" {
		t.Fatalf("parts at the main service: %+v, want only the allowed one", parts)
	}
	if p := parts[0]; p.meta.Value("AccountId") != "1000" || p.meta.Value("DataReceiptRule") != "2" {
		t.Errorf("part at the main service: AccountId %q DataReceiptRule %q, want 1000 and 2",
			p.meta.Value("AccountId"), p.meta.Value("DataReceiptRule"))
	}
	if !strings.Contains(main.Logs.String(), "the part is dropped, the rest stored") {
		t.Errorf("the dropped part was not logged")
	}
	if got := metric(t, main, "weir_receive_rule_dropped_parts_total"); got != 1 {
		t.Errorf("weir_receive_rule_dropped_parts_total = %g, want 1", got)
	}

	// Only a REJECT rule drops a part: a part no rule matches refuses the
	// whole post, and so does a zip whose every part is refused, so that
	// the proxy keeps it. Sent as the trusted proxy would send it.
	asProxy := []string{"Compression", "ZIP", "Authorization", "Bearer " + dfk, "AccountId", "2000"}
	z := zipOf(t, "001.meta", "Feed:"+testFeed+"\nAccountId:1000\nSystem:A\n", "001.dat", "good\n",
		"002.meta", "Feed:"+testFeed+"\nAccountId:999\n", "002.dat", "nobody's\n")
	post(t, main, z, asProxy...).fails(t, http.StatusNotAcceptable, 113, "no data receipt rule accepts")
	z = zipOf(t, "001.meta", "Feed:"+testFeed+"\nSystem:B\n", "001.dat", "b1\n", "002.meta", "Feed:"+testFeed+"\nSystem:B\n", "002.dat", "b2\n")
	post(t, main, z, asProxy...).fails(t, http.StatusNotAcceptable, 113, `data receipt rule 1 ("system B")`)
	if n := len(pxFeedParts(t, main, testFeed)); n != 1 {
		t.Errorf("%d parts at the main service after two refused zips, want still 1", n)
	}
}

// TestReceiptRulesRecorded: a stream records the rules that received its
// parts, never a sender's claim; the rules see the type a post would be
// stored as (the configured spelling, or the feed's default).
func TestReceiptRulesRecorded(t *testing.T) {
	t.Parallel()
	const refFeed = "RR-REFERENCE"
	s := start(t, func(c *config.Config) { c.Receive.ReceiptCheckMode = config.ReceiptPolicy })
	s.CreateFeed(refFeed, "", "Raw Reference")
	path := filepath.Join(t.TempDir(), "rules.json")
	rules := `[
	  {"action": "RECEIVE", "expression": {"type": "term", "field": "System", "condition": "EQUALS", "value": "A"}},
	  {"action": "RECEIVE", "expression": {"type": "term", "field": "System", "condition": "EQUALS", "value": "B"}},
	  {"name": "no reference data", "action": "REJECT",
	   "expression": {"type": "term", "field": "Type", "condition": "EQUALS", "value": "Raw Reference"}},
	  {"action": "RECEIVE"}]`
	if err := os.WriteFile(path, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	weirAdmin(t, s, "receipt-rules", "set", path)
	apptest.WaitFor(t, "the server to use the rules", func() bool {
		return post(t, s, []byte("x"), "Feed", testFeed).code == http.StatusOK
	})

	id := post(t, s, []byte("plain"), "Feed", testFeed, "System", "A", "DataReceiptRule", "999").ok(t)
	if got := streamByReceipt(t, s, id).Attributes.Value("DataReceiptRule"); got != "1" {
		t.Errorf("plain post: DataReceiptRule %q, want 1 (the sender's 999 removed)", got)
	}

	// Three parts of one feed, received by three rules; the header's claim
	// and a meta entry's are both removed.
	z := zipOf(t, "001.meta", "Feed:"+testFeed+"\nSystem:A\nDataReceiptRule:998\n", "001.dat", "a\n",
		"002.meta", "Feed:"+testFeed+"\nSystem:B\n", "002.dat", "b\n",
		"003.meta", "Feed:"+testFeed+"\n", "003.dat", "c\n")
	id = post(t, s, z, "Compression", "ZIP", "DataReceiptRule", "999").ok(t)
	st := streamByReceipt(t, s, id)
	if got := st.Attributes.Value("DataReceiptRule"); got != "1,2,4" {
		t.Errorf("zip stream: DataReceiptRule %q, want 1,2,4", got)
	}
	for i, want := range []string{"1", "2", "4"} {
		m := string(s.Read(st.ID, streamfile.Meta, i))
		if !strings.Contains("\n"+m, "\nDataReceiptRule:"+want+"\n") || strings.Contains(m, "998") {
			t.Errorf("part %d meta has not DataReceiptRule %s alone:\n%s", i, want, m)
		}
	}

	// The rules see the type as it would be stored.
	post(t, s, []byte("ref"), "Feed", testFeed, "Type", "raw reference").
		fails(t, http.StatusNotAcceptable, 113, `data receipt rule 3 ("no reference data")`)
	post(t, s, []byte("ref by default"), "Feed", refFeed).
		fails(t, http.StatusNotAcceptable, 113, `data receipt rule 3 ("no reference data")`)
	if got := post(t, s, []byte("events"), "Feed", refFeed, "Type", "Raw Events"); got.code != http.StatusOK {
		t.Errorf("Raw Events to a reference feed: %d %s", got.code, got.header.Get("Service-Error"))
	}
}

// TestInstantProxyNotTrusted: a proxy that forwards instantly relays a zip
// unread, so even as a trusted forwarder its parts cannot claim an
// identity: the main service stamps them with the proxy's own, as for any
// sender, and its receipt rules decide by that.
func TestInstantProxyNotTrusted(t *testing.T) {
	t.Parallel()
	const private = "RR-PRIVATE"
	main := start(t, func(c *config.Config) {
		c.Receive.AuthenticationRequired = true
		c.Receive.TrustedForwarders = []string{"DATA_FEED_KEY:data-feed-identity-2000"}
	})
	main.CreateFeed(private, "", "")
	dfk, _ := dbDataFeedKey(t, main, "2000", time.Now().Add(time.Hour))
	px := pxProxy(t, "proxy-instant-trusted", func(c *config.Proxy) {
		c.ForwardHTTPDestinations[0].Instant = true
		c.ForwardHTTPDestinations[0].DataFeedKey = dfk
		c.ForwardHTTPDestinations[0].DataFeedKeyOwner = "2000"
	}, main.URL+"/datafeed")

	z := zipOf(t, "001.meta", "Feed:"+private+"\nUploadUserId:root\nUploadUsername:Root\nAccountId:1\n", "001.dat", "claimed\n")
	post(t, px, z, "Compression", "ZIP").accepted(t)
	st := main.Streams()
	if len(st) != 1 {
		t.Fatalf("%d streams at the main service, want 1", len(st))
	}
	p := storedParts(t, main, st[0])[0]
	if got := [3]string{p.meta.Value("UploadUserId"), p.meta.Value("UploadUsername"), p.meta.Value("AccountId")}; got != [3]string{"data-feed-identity-2000", "data-feed-identity-2000", "2000"} {
		t.Errorf("a part relayed by an instant proxy kept the identity it claimed: UploadUserId, UploadUsername, AccountId %q", got)
	}
	// The mark is this hop's business: it is not stored, so a storing
	// proxy could never forward it (nor a sender's) as an attribute.
	if _, ok := st[0].Attributes.Get("Weir-Relay"); ok {
		t.Errorf("the relay mark was stored as an attribute")
	}
}
