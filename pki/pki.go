// Package pki is the master's small certificate authority: it makes the CA at first start, the
// master's server certificate, and the client certificates that identify users, slaves (signed from their
// CSR at join) and, later, services. It also reads the PEM files users hold, with or without a
// password, so the master and the CLI agree on one format.
//
// Certificates follow imec's layout so that existing GPULab clients and habits keep working:
// the user URN is the first URI entry of the SubjectAltName and the e-mail an RFC822 entry.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
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
	"time"
)

// ErrWrongPassword is returned when an encrypted key cannot be decrypted with the password given.
var ErrWrongPassword = errors.New("wrong password for the private key")

// ErrPasswordNeeded is returned when a key is encrypted and no password was given.
var ErrPasswordNeeded = errors.New("the private key is password-protected: give its password")

// CA is a certificate authority able to sign server and client certificates.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
}

// Pool returns a pool holding only this CA, for verifying client or server certificates.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// NewCA makes a fresh self-signed CA valid for ten years.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"GPULab"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// LoadOrCreateCA reads ca.pem and ca-key.pem from dir, or makes them (mode 0600 for the key)
// when neither exists. Several masters sharing one Postgres must share these files.
func LoadOrCreateCA(dir, commonName string) (*CA, bool, error) {
	certPath, keyPath := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		ca, err := ParseCA(certPEM, keyPEM)
		if err != nil {
			return nil, false, fmt.Errorf("load CA from %s: %w", dir, err)
		}
		return ca, false, nil
	case errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist):
	default:
		return nil, false, fmt.Errorf("load CA from %s: need both ca.pem and ca-key.pem: %w", dir, errors.Join(certErr, keyErr))
	}
	ca, err := NewCA(commonName)
	if err != nil {
		return nil, false, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, false, fmt.Errorf("marshal CA key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("create CA folder: %w", err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, false, fmt.Errorf("write CA key: %w", err)
	}
	if err := os.WriteFile(certPath, ca.CertPEM, 0o644); err != nil {
		return nil, false, fmt.Errorf("write CA certificate: %w", err)
	}
	return ca, true, nil
}

// ParseCA reads a CA certificate and its unencrypted key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := firstCert(certPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, errors.New("certificate is not a CA")
	}
	key, err := parseKey(keyPEM, "")
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}, nil
}

// ServerCert issues a TLS server certificate for the given host names and IP addresses.
func (ca *CA) ServerCert(hosts []string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: "gpulab-master", Organization: []string{"GPULab"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("sign server certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parse server certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// Kind says what a client certificate stands for. It is kept in the certificate's
// OrganizationalUnit so the master can refuse slave credentials on user endpoints and back.
type Kind string

// The identities a client certificate can carry.
const (
	KindUser    Kind = "user"
	KindSlave   Kind = "slave"
	KindService Kind = "service"
)

// ClientSpec describes a client certificate to issue.
type ClientSpec struct {
	Kind     Kind
	URN      string // first URI SAN, e.g. urn:publicid:IDN+example.org+user+alice
	Email    string // RFC822 SAN (optional)
	Name     string // common name
	Validity time.Duration
}

// Default lifetimes of client certificates: short enough that a leaked one does not outlive
// its use for long (each can also be revoked), long enough not to be a chore; users renew from
// the portal's profile.
const (
	DefaultUserValidity  = 90 * 24 * time.Hour
	DefaultSlaveValidity = 365 * 24 * time.Hour
	// DefaultServiceValidity: a service (the JupyterHub spawner) is configured once, like a
	// slave; it is revoked, not left to expire, when it must stop.
	DefaultServiceValidity = 365 * 24 * time.Hour
)

// DefaultValidity is the default lifetime of a client certificate of a kind.
func DefaultValidity(k Kind) time.Duration {
	switch k {
	case KindSlave:
		return DefaultSlaveValidity
	case KindService:
		return DefaultServiceValidity
	}
	return DefaultUserValidity
}

// IssueClient signs a client certificate and returns it with its fresh private key.
func (ca *CA) IssueClient(spec ClientSpec) (*x509.Certificate, crypto.Signer, error) {
	tmpl, err := clientTemplate(spec)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate client key: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign client certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse client certificate: %w", err)
	}
	return cert, key, nil
}

func clientTemplate(spec ClientSpec) (*x509.Certificate, error) {
	if spec.Kind == "" {
		return nil, errors.New("client certificate needs a kind")
	}
	u, err := url.Parse(spec.URN)
	if err != nil || u.Scheme != "urn" {
		return nil, fmt.Errorf("client certificate URN %q is not a urn: URI", spec.URN)
	}
	if spec.Validity == 0 {
		spec.Validity = DefaultValidity(spec.Kind)
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject: pkix.Name{
			CommonName:         spec.Name,
			Organization:       []string{"GPULab"},
			OrganizationalUnit: []string{string(spec.Kind)},
		},
		NotBefore:   time.Now().Add(-time.Hour),
		NotAfter:    time.Now().Add(spec.Validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{u},
	}
	if spec.Email != "" {
		tmpl.EmailAddresses = []string{spec.Email}
	}
	return tmpl, nil
}

// SignCSR signs a certificate signing request as a client certificate for spec, so a slave
// (or service) keeps its private key: only the CSR and the certificate cross the network.
// The identity comes from spec, never from the CSR's subject.
func (ca *CA) SignCSR(csrPEM []byte, spec ClientSpec) (*x509.Certificate, error) {
	b, _ := pem.Decode(csrPEM)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("no PEM CERTIFICATE REQUEST found")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("certificate request signature: %w", err)
	}
	tmpl, err := clientTemplate(spec)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, csr.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate request: %w", err)
	}
	return x509.ParseCertificate(der)
}

// NewCSR makes a private key and a certificate signing request for it.
func NewCSR(commonName string) (csrPEM []byte, key crypto.Signer, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: commonName}}, k)
	if err != nil {
		return nil, nil, fmt.Errorf("make certificate request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), k, nil
}

// ClientPEM encodes a certificate and its key in one PEM, as imec's portal hands them out and
// as curl (`--cert f --key f`) and gpulab-cli read them. With a password the key is encrypted
// with the traditional OpenSSL PEM encryption (AES-256-CBC), the one format that Go, curl,
// OpenSSL and Python's cryptography all read.
func ClientPEM(cert *x509.Certificate, key crypto.Signer, password string) ([]byte, error) {
	keyDER, err := x509.MarshalECPrivateKey(key.(*ecdsa.PrivateKey))
	if err != nil {
		return nil, fmt.Errorf("marshal client key: %w", err)
	}
	block := &pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}
	if password != "" {
		//nolint:staticcheck // Legacy PEM encryption is deprecated for its weak KDF, but it is the only
		// password-protected key format that curl, OpenSSL, Python and Go's standard library all read.
		block, err = x509.EncryptPEMBlock(rand.Reader, block.Type, keyDER, []byte(password), x509.PEMCipherAES256)
		if err != nil {
			return nil, fmt.Errorf("encrypt client key: %w", err)
		}
	}
	out := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
	return append(out, pem.EncodeToMemory(block)...), nil
}

// LoadClientPEM reads a PEM holding a certificate and its private key (possibly encrypted with
// the traditional PEM encryption) into a tls.Certificate ready for a client.
func LoadClientPEM(pemData []byte, password string) (tls.Certificate, error) {
	var certs [][]byte
	var keyBlock []byte
	rest := pemData
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		switch b.Type {
		case "CERTIFICATE":
			certs = append(certs, b.Bytes)
		case "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY":
			keyBlock = pem.EncodeToMemory(b)
		case "ENCRYPTED PRIVATE KEY":
			return tls.Certificate{}, errors.New("PKCS#8 encrypted keys are not supported: re-export the key with traditional PEM encryption (openssl ec -aes256) or without a password")
		}
	}
	if len(certs) == 0 {
		return tls.Certificate{}, errors.New("no CERTIFICATE block in the PEM file")
	}
	if keyBlock == nil {
		return tls.Certificate{}, errors.New("no private key in the PEM file: it must hold both the certificate and its key")
	}
	key, err := parseKey(keyBlock, password)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(certs[0])
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parse certificate: %w", err)
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(leaf.PublicKey) {
		return tls.Certificate{}, errors.New("the private key in the PEM file does not belong to its first certificate")
	}
	return tls.Certificate{Certificate: certs, PrivateKey: key, Leaf: leaf}, nil
}

func parseKey(keyPEM []byte, password string) (crypto.Signer, error) {
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, errors.New("no PEM private key found")
	}
	der := b.Bytes
	//nolint:staticcheck // see ClientPEM: the traditional encryption is the interoperable one.
	encrypted := x509.IsEncryptedPEMBlock(b)
	if encrypted {
		if password == "" {
			return nil, ErrPasswordNeeded
		}
		var err error
		//nolint:staticcheck // see ClientPEM.
		der, err = x509.DecryptPEMBlock(b, []byte(password))
		if err != nil {
			return nil, ErrWrongPassword
		}
	}
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
		return nil, errors.New("private key type cannot sign")
	}
	if k, err := x509.ParseECPrivateKey(der); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k, nil
	}
	if encrypted {
		// The legacy encryption has no integrity check: about one wrong password in 256 gets
		// past DecryptPEMBlock's padding test and yields garbage, which is what lands here.
		return nil, ErrWrongPassword
	}
	return nil, errors.New("private key is neither PKCS#8, EC nor PKCS#1")
}

func firstCert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate found")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	return c, nil
}

// Identity is who a verified client certificate stands for.
type Identity struct {
	Kind  Kind
	URN   string
	Email string
	Name  string
}

// IdentityOf reads the identity from a certificate that the TLS stack has already verified
// against the CA. The URN is the first URI SAN, as in imec's certificates.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	if len(cert.URIs) == 0 {
		return Identity{}, errors.New("client certificate has no URI SubjectAltName")
	}
	id := Identity{URN: cert.URIs[0].String(), Name: cert.Subject.CommonName, Kind: KindUser}
	if len(cert.Subject.OrganizationalUnit) > 0 {
		id.Kind = Kind(cert.Subject.OrganizationalUnit[0])
	}
	if len(cert.EmailAddresses) > 0 {
		id.Email = cert.EmailAddresses[0]
	}
	return id, nil
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return n
}
