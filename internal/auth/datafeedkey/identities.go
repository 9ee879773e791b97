package datafeedkey

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/weirhq/weir/internal/attr"
)

// Identity types in the reference file format.
const (
	typeDataFeedKey   = "DATA_FEED_KEY"
	typeCertificateDN = "CERTIFICATE_DN"
)

// keyIdentity is a DATA_FEED_KEY entry of an identity file.
type keyIdentity struct {
	owner     string // the streamMetaData value of the owner header
	hash      string
	salt      string
	alg       Algorithm
	expiresMs int64
	attrs     *attr.Map // streamMetaData; read-only once loaded
	file      string
}

// certIdentity is a CERTIFICATE_DN entry of an identity file.
type certIdentity struct {
	owner     string
	dn        string
	expiresMs int64
	attrs     *attr.Map // read-only once loaded
	file      string
}

// parsedFile is what one identity file holds.
type parsedFile struct {
	keys  []*keyIdentity
	certs []*certIdentity
	// expired counts entries left out because they have expired; rotating
	// keys leaves many, so they are only counted.
	expired int
	// ignored says why other entries were left out (no owner, a hash that
	// can never match, ...), for the log; they do not fail the file.
	ignored []string
}

// allowedField reports whether an identity of type typ may have the field.
// The reference parses strictly: a field its class does not have fails the
// file, so a typo (say "expiryDateEpochMS") is reported instead of silently
// giving a key that expired in 1970.
func allowedField(typ, name string) bool {
	switch name {
	case "type", "expiryDateEpochMs", "streamMetaData":
		return true
	case "hash", "salt", "hashAlgorithm":
		return typ == typeDataFeedKey
	case "certificateDn":
		return typ == typeCertificateDN
	}
	return false
}

// parseIdentities parses an identity file in the reference format:
//
//	{"dataFeedIdentities": [
//	  {"type": "DATA_FEED_KEY", "hash": "…", "salt": "…", "hashAlgorithm": "ARGON2",
//	   "expiryDateEpochMs": 1775237109581, "streamMetaData": {"AccountId": "1000", "K": "V"}},
//	  {"type": "CERTIFICATE_DN", "certificateDn": "CN=…", "expiryDateEpochMs": …, "streamMetaData": {…}}]}
//
// The list may also be named "dataFeedIdentity" (the reference's creator
// parameter is). An error fails the whole file, as in the reference; entries
// that are well formed but unusable (expired at nowMs, no owner, a hash that
// can never verify) are left out and listed in ignored.
func parseIdentities(data []byte, ownerKey string, nowMs int64, file string) (*parsedFile, error) {
	top, err := object(data)
	if err != nil {
		return nil, err
	}
	var entries []json.RawMessage
	for _, name := range top.order {
		raw := top.fields[name]
		if name != "dataFeedIdentities" && name != "dataFeedIdentity" {
			return nil, fmt.Errorf("unknown field %q at the top level (want dataFeedIdentities)", name)
		}
		list, err := array(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		entries = append(entries, list...)
	}
	p := &parsedFile{}
	for i, raw := range entries {
		if err := p.add(i, raw, ownerKey, nowMs, file); err != nil {
			return nil, fmt.Errorf("identity %d: %w", i+1, err)
		}
	}
	return p, nil
}

// add parses one entry of the identity list.
func (p *parsedFile) add(i int, raw json.RawMessage, ownerKey string, nowMs int64, file string) error {
	if isNull(raw) {
		return nil // the reference drops null entries
	}
	obj, err := object(raw)
	if err != nil {
		return err
	}
	typ, _, err := scalar(obj.fields["type"])
	if err != nil {
		return fmt.Errorf("type: %w", err)
	}
	switch typ {
	case typeDataFeedKey, typeCertificateDN:
	case "":
		return errors.New(`no "type" (want DATA_FEED_KEY or CERTIFICATE_DN)`)
	default:
		return fmt.Errorf("type %q is not DATA_FEED_KEY or CERTIFICATE_DN", typ)
	}
	for _, name := range obj.order {
		if !allowedField(typ, name) {
			return fmt.Errorf("unknown field %q for type %s", name, typ)
		}
	}
	expiresMs, err := epochMs(obj.fields["expiryDateEpochMs"])
	if err != nil {
		return fmt.Errorf("expiryDateEpochMs: %w", err)
	}
	attrs, err := streamMetaData(obj.fields["streamMetaData"])
	if err != nil {
		return fmt.Errorf("streamMetaData: %w", err)
	}
	owner := attrs.Value(ownerKey)

	ignore := func(format string, a ...any) error {
		p.ignored = append(p.ignored, fmt.Sprintf("identity %d (%s): ", i+1, typ)+fmt.Sprintf(format, a...))
		return nil
	}
	if typ == typeCertificateDN {
		dn, null, err := scalar(obj.fields["certificateDn"])
		switch {
		case err != nil:
			return fmt.Errorf("certificateDn: %w", err)
		case null:
			return errors.New("no certificateDn")
		case expiresMs <= nowMs:
			p.expired++
			return nil
		case owner == "":
			return ignore("no value for owner key %q in streamMetaData", ownerKey)
		case strings.TrimSpace(dn) == "":
			return ignore("blank certificateDn")
		}
		p.certs = append(p.certs, &certIdentity{owner: owner, dn: dn, expiresMs: expiresMs, attrs: attrs, file: file})
		return nil
	}

	hash, _, err := scalar(obj.fields["hash"])
	if err != nil {
		return fmt.Errorf("hash: %w", err)
	}
	if strings.TrimSpace(hash) == "" {
		return errors.New("hash must not be blank")
	}
	salt, _, err := scalar(obj.fields["salt"])
	if err != nil {
		return fmt.Errorf("salt: %w", err)
	}
	algName, _, err := scalar(obj.fields["hashAlgorithm"])
	if err != nil {
		return fmt.Errorf("hashAlgorithm: %w", err)
	}
	alg, err := parseAlgorithm(algName)
	if err != nil {
		return err
	}
	switch {
	case expiresMs <= nowMs:
		p.expired++
		return nil
	case owner == "":
		return ignore("no value for owner key %q in streamMetaData", ownerKey)
	}
	if err := checkStored(hash, salt, alg); err != nil {
		return ignore("can never match: %v", err)
	}
	p.keys = append(p.keys, &keyIdentity{owner: owner, hash: hash, salt: salt, alg: alg,
		expiresMs: expiresMs, attrs: attrs, file: file})
	return nil
}

// jsonObject is a JSON object's fields, exact names, with their order.
type jsonObject struct {
	fields map[string]json.RawMessage
	order  []string
}

// object decodes a JSON object (and nothing after it). A repeated field
// keeps its last value, as the reference's parser does.
func object(data []byte) (jsonObject, error) {
	obj := jsonObject{fields: map[string]json.RawMessage{}}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := expectDelim(dec, '{', "a JSON object"); err != nil {
		return obj, err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return obj, err
		}
		name, _ := tok.(string) // object keys are always strings
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return obj, fmt.Errorf("field %q: %w", name, err)
		}
		if _, seen := obj.fields[name]; !seen {
			obj.order = append(obj.order, name)
		}
		obj.fields[name] = raw
	}
	return obj, expectEnd(dec)
}

// array decodes a JSON array; null is an empty one.
func array(raw json.RawMessage) ([]json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := expectDelim(dec, '[', "a JSON array"); err != nil {
		return nil, err
	}
	var out []json.RawMessage
	for dec.More() {
		var r json.RawMessage
		if err := dec.Decode(&r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, expectEnd(dec)
}

func expectDelim(dec *json.Decoder, d json.Delim, what string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if got, ok := tok.(json.Delim); !ok || got != d {
		return fmt.Errorf("want %s, got %s", what, describe(tok))
	}
	return nil
}

// expectEnd reads the closing delimiter and checks nothing follows.
func expectEnd(dec *json.Decoder) error {
	if _, err := dec.Token(); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errors.New("data after the end of the JSON value")
		}
		return err
	}
	return nil
}

func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		return string(v)
	case string:
		return "a string"
	case nil:
		return "null"
	case bool:
		return "a boolean"
	}
	return "a number"
}

func isNull(raw json.RawMessage) bool {
	return raw == nil || string(bytes.TrimSpace(raw)) == "null"
}

// scalar reads a string field. As the reference's parser does, a number or
// boolean is taken as its text; null or an absent field is "" with null set.
func scalar(raw json.RawMessage) (s string, null bool, err error) {
	if isNull(raw) {
		return "", true, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return "", false, err
	}
	switch v := tok.(type) {
	case string:
		return v, false, nil
	case json.Number:
		return v.String(), false, nil
	case bool:
		return strconv.FormatBool(v), false, nil
	}
	return "", false, fmt.Errorf("want a string, got %s", describe(tok))
}

// epochMs reads expiryDateEpochMs: an integer; absent or null is 0 (already
// expired), as the reference reads a missing long.
func epochMs(raw json.RawMessage) (int64, error) {
	if isNull(raw) {
		return 0, nil
	}
	s := string(bytes.TrimSpace(raw))
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return 0, errors.New("want a whole number of milliseconds since the epoch")
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errors.New("want a whole number of milliseconds since the epoch")
	}
	return v, nil
}

// streamMetaData reads the attributes of an identity. Keys are
// case-insensitive and the first of two spellings wins, as in the
// reference; null values and blank keys are dropped.
func streamMetaData(raw json.RawMessage) (*attr.Map, error) {
	m := new(attr.Map)
	if isNull(raw) {
		return m, nil
	}
	obj, err := object(raw)
	if err != nil {
		return nil, err
	}
	for _, k := range obj.order {
		v, null, err := scalar(obj.fields[k])
		if err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		if null || strings.TrimSpace(k) == "" {
			continue
		}
		if _, dup := m.Get(k); dup {
			continue
		}
		m.Put(k, v)
	}
	return m, nil
}
