package feed

import (
	"testing"

	"github.com/weirhq/weir/internal/attr"
)

func testAttrs() *attr.Map {
	m := &attr.Map{}
	m.Put("AccountId", "123")
	m.Put("Component", "Component XYZ")
	m.Put("Format", "XML")
	return m
}

func TestGenerateName(t *testing.T) {
	attrs := testAttrs()
	attrs.Put("Padded", "  a-b.c  ")
	attrs.Put("Long", "ſtraße")
	for _, tc := range []struct{ template, want string }{
		// The reference system's cases (test 48).
		{"${AccountId}-${compONENT}-${FORMAT}", "123-COMPONENT_XYZ-XML"},
		{"#foo!-${AccountId}-#bar!", "_FOO_-123-_BAR_"},
		{"${AccountId}-${unknown}-${FORMAT}", "123--XML"},
		{"foo bar", "FOO_BAR"},
		{"", ""},
		// Values lose '-' and other punctuation; literal text keeps '-'.
		{"x-${Padded}-y", "X-A_B_C-Y"},
		{"${ AccountId }", "123"},
		{"pre_${Format}_post", "PRE_XML_POST"},
		{"${AccountId}${Format}", "123XML"},
		// Unterminated or odd placeholders are literal text.
		{"${AccountId", "__ACCOUNTID"},
		{"a${", "A__"},
		{"$AccountId", "_ACCOUNTID"},
		{"${}", ""},
		{"${a${Format}", ""},
		{"}${Format}{", "_XML_"},
		// Upper-casing comes first: 'ſ' becomes 'S'; 'ß' has no single upper case.
		{"${Long}", "STRA_E"},
		{"é\xff", "__"},
	} {
		if got := GenerateName(tc.template, attrs); got != tc.want {
			t.Errorf("GenerateName(%q) = %q, want %q", tc.template, got, tc.want)
		}
	}
	if got := GenerateName("${AccountId}-x", nil); got != "-X" {
		t.Errorf("GenerateName with nil attrs = %q", got)
	}
}

func TestMissingMandatory(t *testing.T) {
	attrs := testAttrs()
	attrs.Put("Blank", "   ")
	for _, tc := range []struct {
		names       []string
		wantName    string
		wantMissing bool
	}{
		{nil, "", false},
		{[]string{"AccountId", "component", "FORMAT"}, "", false},
		{[]string{"AccountId", "System", "Other"}, "System", true},
		{[]string{"Blank"}, "Blank", true},
		{[]string{"", "  ", "Format"}, "", false},
	} {
		name, missing := MissingMandatory(tc.names, attrs)
		if name != tc.wantName || missing != tc.wantMissing {
			t.Errorf("MissingMandatory(%q) = %q, %v; want %q, %v", tc.names, name, missing, tc.wantName, tc.wantMissing)
		}
	}
	// Test 48: a missing mandatory Format is reported (the caller answers 103).
	noFormat := testAttrs()
	noFormat.Delete("Format")
	if name, missing := MissingMandatory([]string{"AccountId", "Format"}, noFormat); !missing || name != "Format" {
		t.Errorf("without Format: %q, %v", name, missing)
	}
}

func BenchmarkGenerateName(b *testing.B) {
	attrs := testAttrs()
	b.ReportAllocs()
	for b.Loop() {
		_ = GenerateName("${AccountId}-${Component}-${Format}", attrs)
	}
}
