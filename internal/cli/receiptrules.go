package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/receiptrule"
)

// showReceiptRules prints the stored rules as the JSON array `set` takes,
// so that show, edit and set round-trip.
func showReceiptRules(ctx context.Context, repo *meta.Repo, out io.Writer) error {
	rr, err := repo.GetReceiptRules(ctx)
	if err != nil {
		return err
	}
	rules, _, err := receiptrule.Parse([]byte(rr.Rules))
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(rules, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}

// setReceiptRules validates a file of rules and stores it whatever the
// stored version (last writer wins, as `feed update` does).
func setReceiptRules(ctx context.Context, repo *meta.Repo, name string, stdin io.Reader, out io.Writer) error {
	in := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	b, err := io.ReadAll(io.LimitReader(in, receiptrule.MaxJSONBytes+1))
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) > receiptrule.MaxJSONBytes {
		return fmt.Errorf("%s is larger than %d MiB", name, receiptrule.MaxJSONBytes>>20)
	}
	rules, set, err := receiptrule.Parse(b)
	if err != nil {
		return fmt.Errorf("%s: the receipt rules are not valid: %w", name, err)
	}
	canon, err := json.Marshal(rules)
	if err != nil {
		return err
	}
	rr, err := repo.PutReceiptRules(ctx, string(canon), meta.AnyVersion, "weir admin")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "stored %d receipt rules (%d enabled) as version %d; running services use them within %s\n",
		len(rules), set.Len(), rr.Version, receiptrule.DefaultRefresh)
	return err
}
