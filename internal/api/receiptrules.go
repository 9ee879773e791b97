package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/receiptrule"
)

// ReceiptRules is the data receipt rule set as the API shows it.
type ReceiptRules struct {
	Rules      []receiptrule.Rule `json:"rules" doc:"In order: the first enabled rule that matches a post decides; a post no rule matches is refused (406, status 113), so an empty list refuses every post."`
	Version    int64              `json:"version" doc:"Up by one on every change; 0 before the first. PUT names the version it replaces."`
	UpdateMs   int64              `json:"updateMs" doc:"When the rules last changed (epoch ms); 0 before the first change."`
	UpdateUser string             `json:"updateUser" doc:"Who changed them last."`
	InEffect   bool               `json:"inEffect" doc:"Whether this service decides posts by the rules: receive.receiptCheckMode is RECEIPT_POLICY."`
}

type receiptRulesOutput struct{ Body ReceiptRules }

type putReceiptRulesInput struct {
	Body struct {
		Rules   []receiptrule.Rule `json:"rules" required:"true" maxItems:"1000" doc:"The complete rule set, in order."`
		Version int64              `json:"version" required:"true" minimum:"0" doc:"The version this replaces, as read (0 for rules never set); if they changed since, 409 with the current version."`
	}
}

type decideReceiptRulesInput struct {
	Body struct {
		Attributes map[string]string  `json:"attributes" required:"true" doc:"A post's attributes as the rules would see them: its headers and what weir adds (UploadUserId, UploadUsername, the data feed key's attributes, RemoteHost, ...). Names match in any case."`
		Rules      []receiptrule.Rule `json:"rules,omitempty" maxItems:"1000" doc:"Rules to try instead of the stored ones (nothing is stored)."`
	}
}

type receiptDecisionOutput struct {
	Body struct {
		Rule   int                `json:"rule" doc:"The number (1-based position in the list) of the rule that decided; 0: no rule matched, and the post is refused."`
		Name   string             `json:"name,omitempty" doc:"That rule's name."`
		Action receiptrule.Action `json:"action" enum:"RECEIVE,REJECT,DROP" doc:"What happens to the post. RECEIVE still needs the feed to exist."`
	}
}

func (s *server) registerReceiptRules() {
	const tag = "Receipt rules"
	const needs = "Needs Manage Data Receipt Rules. "
	huma.Register(s.api, secured(huma.Operation{
		OperationID: "get-receipt-rules", Method: http.MethodGet, Path: "/receiptRules", Tags: []string{tag},
		Summary: "Get the data receipt rules",
		Description: needs + "The rules decide which posts are taken when receive.receiptCheckMode is RECEIPT_POLICY: " +
			"the first enabled rule whose expression matches a post's attributes decides (RECEIVE, REJECT or DROP), " +
			"a post no rule matches is refused with 406 and status 113, and a received post records the rule's number " +
			"as its DataReceiptRule attribute and needs its feed to exist (406, status 101). Feed statuses are not " +
			"consulted in that mode.",
	}), func(ctx context.Context, _ *struct{}) (*receiptRulesOutput, error) {
		if err := require(ctx, access.ManageReceiptRules); err != nil {
			return nil, err
		}
		rr, err := s.Repo.GetReceiptRules(ctx)
		if err != nil {
			return nil, s.internal("get receipt rules", err)
		}
		return s.receiptRulesOutput(rr)
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "replace-receipt-rules", Method: http.MethodPut, Path: "/receiptRules", Tags: []string{tag},
		Summary: "Replace the data receipt rules",
		Description: needs + "Takes the complete rule set with the version it replaces: a version that is not the " +
			"current one is 409 with the current version; a rule that is not valid is 422 naming where. The new rules " +
			"decide the posts that start after the change on this node, and on other nodes of a cluster within 5 seconds.",
		Errors:       []int{http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity},
		MaxBodyBytes: receiptrule.MaxJSONBytes,
	}), func(ctx context.Context, in *putReceiptRulesInput) (*receiptRulesOutput, error) {
		if err := require(ctx, access.ManageReceiptRules); err != nil {
			return nil, err
		}
		rules := in.Body.Rules
		if rules == nil {
			rules = []receiptrule.Rule{}
		}
		if _, err := compileRules(rules); err != nil {
			return nil, err
		}
		b, err := json.Marshal(rules)
		if err != nil {
			return nil, s.internal("encode receipt rules", err)
		}
		rr, err := s.Repo.PutReceiptRules(ctx, string(b), in.Body.Version, caller(ctx).User.Name)
		if err != nil {
			if se := (*meta.StaleError)(nil); errors.As(err, &se) {
				return nil, staleError(se)
			}
			return nil, s.internal("put receipt rules", err)
		}
		if s.ReceiptRules != nil {
			s.ReceiptRules.Invalidate()
		}
		s.Log.Info("receipt rules replaced", "version", rr.Version, "rules", len(rules), "user", rr.UpdateUser)
		return s.receiptRulesOutput(rr)
	})

	huma.Register(s.api, secured(huma.Operation{
		OperationID: "decide-receipt-rules", Method: http.MethodPost, Path: "/receiptRules/decide", Tags: []string{tag},
		Summary: "Decide a post by the data receipt rules",
		Description: needs + "Says which rule would decide a post with these attributes, and what it would do: the " +
			"stored rules, or the rules sent with the question (to try them before storing them). Nothing is stored " +
			"and no post is made; whether the feed exists is not checked.",
		Errors:       []int{http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity},
		MaxBodyBytes: receiptrule.MaxJSONBytes,
	}), func(ctx context.Context, in *decideReceiptRulesInput) (*receiptDecisionOutput, error) {
		if err := require(ctx, access.ManageReceiptRules); err != nil {
			return nil, err
		}
		var set *receiptrule.Set
		var err error
		if in.Body.Rules != nil {
			set, err = compileRules(in.Body.Rules)
		} else {
			set, err = s.storedRules(ctx)
		}
		if err != nil {
			return nil, err
		}
		a := &attr.Map{}
		for k, v := range in.Body.Attributes {
			if _, dup := a.Get(k); dup {
				return nil, huma.Error422UnprocessableEntity("attribute names are matched in any case",
					&huma.ErrorDetail{Location: "body.attributes", Message: "two attributes are named " + k + " in different cases"})
			}
			a.Put(k, v)
		}
		d := set.Decide(a.Get)
		out := &receiptDecisionOutput{}
		out.Body.Rule, out.Body.Name, out.Body.Action = d.Rule, d.Name, d.Action
		return out, nil
	})
}

// compileRules validates rules, answering 422 with where the problem is.
func compileRules(rules []receiptrule.Rule) (*receiptrule.Set, error) {
	set, err := receiptrule.Compile(rules)
	if err != nil {
		var re *receiptrule.Error
		if errors.As(err, &re) {
			return nil, huma.Error422UnprocessableEntity("the receipt rules are not valid",
				&huma.ErrorDetail{Location: "body." + re.Path, Message: re.Msg})
		}
		return nil, huma.Error422UnprocessableEntity(err.Error())
	}
	return set, nil
}

// storedRules reads and compiles the stored rules, as the datafeed would.
func (s *server) storedRules(ctx context.Context) (*receiptrule.Set, error) {
	rr, err := s.Repo.GetReceiptRules(ctx)
	if err != nil {
		return nil, s.internal("get receipt rules", err)
	}
	_, set, err := receiptrule.Parse([]byte(rr.Rules))
	if err != nil {
		return nil, s.internal("parse stored receipt rules", err)
	}
	return set, nil
}

func (s *server) receiptRulesOutput(rr meta.ReceiptRules) (*receiptRulesOutput, error) {
	rules, _, err := receiptrule.Parse([]byte(rr.Rules))
	if err != nil {
		return nil, s.internal("parse stored receipt rules", err)
	}
	return &receiptRulesOutput{Body: ReceiptRules{Rules: rules, Version: rr.Version, UpdateMs: rr.UpdateMs,
		UpdateUser: rr.UpdateUser, InEffect: s.Config.Receive.ReceiptCheckMode == config.ReceiptPolicy}}, nil
}
