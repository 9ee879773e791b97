package auth

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"testing"
)

// rawName encodes an RDN sequence, least specific first, as a
// certificate holds it; each pair is an OID and a string value.
func rawName(t *testing.T, pairs ...any) []byte {
	t.Helper()
	var seq pkix.RDNSequence
	for i := 0; i+1 < len(pairs); i += 2 {
		seq = append(seq, pkix.RelativeDistinguishedNameSET{{Type: pairs[i].(asn1.ObjectIdentifier), Value: pairs[i+1]}})
	}
	der, err := asn1.Marshal(seq)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

var (
	oidC     = asn1.ObjectIdentifier{2, 5, 4, 6}
	oidO     = asn1.ObjectIdentifier{2, 5, 4, 10}
	oidCN    = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidEmail = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}
	oidDC    = asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 25}
	oidOther = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 99999, 1}
)

// TestSubjectDN: a certificate's subject reads as the reference (Java's
// X500Name) writes it: attributes in the certificate's order, most
// specific first, an e-mail address as EMAILADDRESS=, not as
// pkix.Name.String's "1.2.840.113549.1.9.1=#16..." moved to the end.
func TestSubjectDN(t *testing.T) {
	ia5 := func(s string) asn1.RawValue {
		return asn1.RawValue{Tag: asn1.TagIA5String, Bytes: []byte(s)}
	}
	for _, tc := range []struct {
		name string
		raw  []byte
		want string
	}{
		{"email last", rawName(t, oidC, "GB", oidO, "Example", oidCN, "Log Sender", oidEmail, ia5("sender@example.org")),
			"EMAILADDRESS=sender@example.org,CN=Log Sender,O=Example,C=GB"},
		{"email before CN", rawName(t, oidC, "GB", oidEmail, ia5("sender@example.org"), oidCN, "Log Sender"),
			"CN=Log Sender,EMAILADDRESS=sender@example.org,C=GB"},
		{"domain components and escapes", rawName(t, oidDC, ia5("org"), oidDC, ia5("example"), oidCN, "Smith, John+1"),
			`CN=Smith\, John\+1,DC=example,DC=org`},
		{"unknown type as pkix writes it", rawName(t, oidO, "Example", oidOther, "x"),
			"1.3.6.1.4.1.99999.1=#130178,O=Example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SubjectDN(&x509.Certificate{RawSubject: tc.raw}); got != tc.want {
				t.Errorf("SubjectDN = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMutualTLSEmailAddress: a client certificate whose subject holds an
// e-mail address is recorded in RemoteDN the way the reference records
// it, so that certificate identities written for the reference match.
func TestMutualTLSEmailAddress(t *testing.T) {
	p := newPKI(t)
	ia5 := asn1.RawValue{Tag: asn1.TagIA5String, Bytes: []byte("sender@example.org")}
	cert := p.ca.issue(t, &x509.Certificate{
		RawSubject:  rawName(t, oidC, "GB", oidO, "Example", oidCN, "Log Sender", oidEmail, ia5),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	srv, _, _ := p.startServer(t, tls.VerifyClientCertIfGiven, newCerts(t, CertOptions{}))
	res, err := p.send(t, srv, tls.VersionTLS13, &cert)
	if err != nil {
		t.Fatal(err)
	}
	if res.Subject != "Log Sender" {
		t.Errorf("identity %q, want Log Sender", res.Subject)
	}
	if want := "EMAILADDRESS=sender@example.org,CN=Log Sender,O=Example,C=GB"; str(res.RemoteDN) != want {
		t.Errorf("RemoteDN %q, want %q", str(res.RemoteDN), want)
	}
}
