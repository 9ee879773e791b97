package auth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"strings"
)

// oidCommonName is the attribute type whose rendering SubjectDN borrows
// to escape values the way pkix does.
var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

// dnNames are the attribute names SubjectDN writes beyond pkix's (C, O,
// OU, CN, SERIALNUMBER, L, ST, STREET, POSTALCODE), which writes any other
// type as its OID and a hex-encoded value: the names Java's
// X500Name writes, which the reference uses for a certificate's DN and
// which identity files written for it therefore hold.
var dnNames = map[string]string{
	"1.2.840.113549.1.9.1":       "EMAILADDRESS",
	"0.9.2342.19200300.100.1.25": "DC",
	"0.9.2342.19200300.100.1.1":  "UID",
	"2.5.4.4":                    "SURNAME",
	"2.5.4.42":                   "GIVENNAME",
	"2.5.4.43":                   "INITIALS",
	"2.5.4.44":                   "GENERATION",
	"2.5.4.12":                   "T",
	"2.5.4.46":                   "DNQUALIFIER",
}

// SubjectDN renders a certificate's subject as RFC 4514 does, most
// specific RDN first, in the order the certificate holds its attributes.
// Unlike pkix.Name.String, it names the attributes above instead of
// writing "1.2.840.113549.1.9.1=#16..." for an e-mail address, and it
// keeps the certificate's order (pkix moves attributes it does not parse
// to the end), so that the DN reads as the reference writes it.
func SubjectDN(c *x509.Certificate) string {
	var seq pkix.RDNSequence
	if rest, err := asn1.Unmarshal(c.RawSubject, &seq); err != nil || len(rest) != 0 {
		return c.Subject.String()
	}
	var b strings.Builder
	for i := len(seq) - 1; i >= 0; i-- {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		for j, atv := range seq[i] {
			if j > 0 {
				b.WriteByte('+')
			}
			name, ok := dnNames[atv.Type.String()]
			s, isString := atv.Value.(string)
			if !ok || !isString {
				b.WriteString(pkix.RDNSequence{{atv}}.String())
				continue
			}
			// pkix's escaping of a value, under a name it knows.
			esc := pkix.RDNSequence{{{Type: oidCommonName, Value: s}}}.String()
			b.WriteString(name)
			b.WriteString(strings.TrimPrefix(esc, "CN"))
		}
	}
	return b.String()
}
