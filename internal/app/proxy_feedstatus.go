package app

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/weirhq/weir/internal/api"
	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/feed"
	"github.com/weirhq/weir/internal/receive"
)

// proxyFeedStatus answers feed status questions on a proxy, in the main
// service's wire format, so that a proxy in front of this one can ask here
// as it would ask the main service: the answer is this proxy's own check
// (which asks its downstream, cached). Callers authenticate as senders do
// (a data feed key, token or certificate that this proxy's datafeed
// accepts), since that is the credential an upstream proxy forwards with.
func proxyFeedStatus(h *receive.Handler, chain *auth.Chain, log *slog.Logger) http.Handler {
	wire := map[feed.Status]string{feed.Receive: "Receive", feed.Reject: "Reject", feed.Drop: "Drop"}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attrs := &attr.Map{}
		if chain != nil {
			if _, err := chain.Authenticate(r.Context(), &auth.Request{HTTP: r, Attrs: attrs}); err != nil {
				var f *auth.Failure
				msg := "authentication failed"
				if errors.As(err, &f) {
					msg = auth.CodeText(f.Code)
					if f.Detail != "" {
						msg += " - " + f.Detail
					}
				}
				http.Error(w, msg, http.StatusUnauthorized)
				return
			}
		}
		var q api.FeedStatusQuery
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&q); err != nil && !errors.Is(err, io.EOF) {
			http.Error(w, "the body is not a feed status question (JSON): "+err.Error(), http.StatusBadRequest)
			return
		}
		for k, v := range q.AttributeMap {
			attrs.Put(k, v)
		}
		if u := q.UserDesc; u != nil {
			if u.SubjectID != "" {
				attrs.Put("UploadUserId", u.SubjectID)
			}
			if u.DisplayName != "" {
				attrs.Put("UploadUsername", u.DisplayName)
			}
		}
		ans, err := h.FeedStatus(r.Context(), strings.TrimSpace(q.FeedName), attrs)
		if err != nil {
			log.Error("feed status question failed", "feed", q.FeedName, "err", err)
			w.Header().Set("Retry-After", "5")
			http.Error(w, "the status of the feed cannot be checked now", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(api.FeedStatusAnswer{Status: wire[ans.Status], Message: ans.Message,
			StroomStatusCode: ans.Code.StroomStatusName(), StatusCode: int(ans.Code)})
	})
}
