package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// ErrInvalid is wrapped by every refusal of an input: a bad name, host or
// file.
var ErrInvalid = errors.New("invalid certificate input")

// Kinds of identity a certificate names.
const (
	KindNode = "node"
	KindUser = "user"
)

// Default validity periods.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	CertValidity = 365 * 24 * time.Hour
)

// namePattern is what a node id or user name may be: it names files and
// goes into a URI.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Pair is a certificate and its private key.
type Pair struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA makes a self-signed cluster CA valid for validity.
func NewCA(validity time.Duration, now time.Time) (Pair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "Cairn cluster CA", Organization: []string{"Cairn"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return sign(tmpl, nil)
}

// NewNode makes node id's certificate, signed by ca, for serving and for
// dialing, valid for hosts (names and IP addresses).
func NewNode(ca Pair, id string, hosts []string, validity time.Duration, now time.Time) (Pair, error) {
	if err := checkName("node id", id); err != nil {
		return Pair{}, err
	}
	if len(hosts) == 0 {
		return Pair{}, fmt.Errorf("%w: node %s needs at least one host name or address it is reached at (--hosts)", ErrInvalid, id)
	}
	tmpl := leaf(KindNode, id, validity, now)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		switch ip := net.ParseIP(h); {
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		case h != "" && !strings.ContainsAny(h, " /:@"):
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		default:
			return Pair{}, fmt.Errorf("%w: host %q is neither a host name nor an IP address", ErrInvalid, h)
		}
	}
	return sign(tmpl, &ca)
}

// NewUser makes user name's client certificate, signed by ca.
func NewUser(ca Pair, name string, validity time.Duration, now time.Time) (Pair, error) {
	if err := checkName("user name", name); err != nil {
		return Pair{}, err
	}
	tmpl := leaf(KindUser, name, validity, now)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return sign(tmpl, &ca)
}

// Identity is the kind (KindNode or KindUser) and name a certificate made
// here names in its URI; ok is false for any other certificate.
func Identity(c *x509.Certificate) (kind, name string, ok bool) {
	for _, u := range c.URIs {
		if u.Scheme == "cairn" && (u.Host == KindNode || u.Host == KindUser) {
			name := strings.TrimPrefix(u.Path, "/")
			if namePattern.MatchString(name) && name == c.Subject.CommonName {
				return u.Host, name, true
			}
		}
	}
	return "", "", false
}

func checkName(what, name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("%w: %s %q: use 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, what, name)
	}
	return nil
}

func leaf(kind, name string, validity time.Duration, now time.Time) *x509.Certificate {
	u := &url.URL{Scheme: "cairn", Host: kind, Path: "/" + name}
	return &x509.Certificate{
		Subject:   pkix.Name{CommonName: name, Organization: []string{"Cairn"}},
		URIs:      []*url.URL{u},
		NotBefore: now.Add(-time.Hour),
		NotAfter:  now.Add(validity),
		KeyUsage:  x509.KeyUsageDigitalSignature,
	}
}

// sign gives tmpl a fresh key and serial number and signs it with parent,
// or with itself when parent is nil.
func sign(tmpl *x509.Certificate, parent *Pair) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return Pair{}, err
	}
	tmpl.SerialNumber = serial
	issuer, signer := tmpl, key
	if parent != nil {
		issuer, signer = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &key.PublicKey, signer)
	if err != nil {
		return Pair{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return Pair{}, err
	}
	return Pair{Cert: cert, Key: key}, nil
}

// Write writes p as dir/name.pem and dir/name-key.pem (the key readable by
// its owner only), refusing to replace either unless force.
func (p Pair) Write(dir, name string, force bool) (certFile, keyFile string, err error) {
	keyDER, err := x509.MarshalECPrivateKey(p.Key)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if !force {
		for _, f := range []string{certFile, keyFile} {
			if _, err := os.Stat(f); err == nil {
				return "", "", fmt.Errorf("%w: %s exists; remove it or use --force to replace it", ErrInvalid, f)
			}
		}
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.Cert.Raw}), 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// ReadCA reads dir/ca.pem and dir/ca-key.pem, as `cairn cert ca` wrote
// them.
func ReadCA(dir string) (Pair, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return Pair{}, fmt.Errorf("%w: the CA's certificate: %v (make one with cairn cert ca --out %s)", ErrInvalid, err, dir)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		return Pair{}, fmt.Errorf("%w: the CA's key: %v", ErrInvalid, err)
	}
	return parsePair(certPEM, keyPEM)
}

func parsePair(certPEM, keyPEM []byte) (Pair, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return Pair{}, fmt.Errorf("%w: no PEM certificate", ErrInvalid)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return Pair{}, fmt.Errorf("%w: certificate: %v", ErrInvalid, err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return Pair{}, fmt.Errorf("%w: no PEM key", ErrInvalid)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return Pair{}, fmt.Errorf("%w: key: %v", ErrInvalid, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return Pair{}, fmt.Errorf("%w: the key is not the certificate's", ErrInvalid)
	}
	return Pair{Cert: cert, Key: key}, nil
}
