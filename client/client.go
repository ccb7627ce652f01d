// Package client is a small typed client of the GPULab JSON API (v3.1), authenticated with the
// PEM file (certificate plus key) that users download from the portal, exactly as imec's
// clients and curl use it. The CLI is its main user; anything else that speaks to a master
// (scripts, the end-to-end tests) can use it too.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/pki"
)

// Config says which master to talk to and how to authenticate.
type Config struct {
	// BaseURL is the API base (see NormalizeBaseURL for the forms accepted); empty means
	// DefaultBaseURL.
	BaseURL string
	// CertPEM is the user's login PEM: certificate and private key in one file. Without it the
	// client is anonymous and can only call the public endpoints (version, clusters, slaves).
	CertPEM []byte
	// CertName names the PEM in error messages (usually its file name).
	CertName string
	// Password decrypts the key when it is encrypted.
	Password string
	// ServerCA is an optional PEM of CA certificates to trust for the master's certificate, in
	// addition to the system roots (a master with its own CA needs it).
	ServerCA []byte
	// ServerCAName names ServerCA in error messages.
	ServerCAName string
	// Timeout bounds each request; 0 means 30 seconds.
	Timeout time.Duration
	// UserAgent is sent with each request; empty means "gpulab-client".
	UserAgent string
	// Debug, when set, receives one line per request and per response. Keys, passwords and
	// request bodies are never written to it.
	Debug io.Writer
}

// Identity is who the client certificate says the user is.
type Identity struct {
	// UserURN is the first URI SubjectAltName: urn:publicid:IDN+<authority>+user+<name>.
	UserURN string
	// Email is the first RFC822 SubjectAltName, if any.
	Email string
	// NotAfter is the end of the certificate's validity.
	NotAfter time.Time
}

// Authority returns the authority part of the user URN, which also qualifies project names.
func (id Identity) Authority() string {
	auth, _, _ := SplitURN(id.UserURN)
	return auth
}

// Client calls one master's API. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	http      *http.Client
	identity  *Identity
	debug     io.Writer
	userAgent string
	// retries and retryWait govern the retry of idempotent requests on transient failures.
	retries   int
	retryWait time.Duration
}

// New checks the configuration (the URL, the PEM and its password, the CA file) and builds a
// client. It fails early, with a message naming the file at fault, rather than on the first call.
func New(cfg Config) (*Client, error) {
	base, err := NormalizeBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(cfg.ServerCA) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(cfg.ServerCA) {
			return nil, fmt.Errorf("server CA %s: no PEM certificate found", nameOr(cfg.ServerCAName, "file"))
		}
		tlsConf.RootCAs = pool
	}
	c := &Client{
		base:      base,
		debug:     cfg.Debug,
		userAgent: cfg.UserAgent,
		retries:   2,
		retryWait: 300 * time.Millisecond,
	}
	if c.userAgent == "" {
		c.userAgent = "gpulab-client"
	}
	if len(cfg.CertPEM) > 0 {
		certName := nameOr(cfg.CertName, "PEM")
		cert, err := pki.LoadClientPEM(cfg.CertPEM, cfg.Password)
		switch {
		case errors.Is(err, ErrPasswordRequired):
			return nil, fmt.Errorf("certificate %s: %w", certName, err)
		case errors.Is(err, ErrWrongPassword):
			return nil, fmt.Errorf("wrong password for certificate %s: %w", certName, err)
		case err != nil:
			return nil, fmt.Errorf("certificate %s: %w", certName, err)
		}
		if cert.Leaf == nil {
			if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
				return nil, fmt.Errorf("certificate %s: %w", certName, err)
			}
		}
		now := time.Now()
		if now.After(cert.Leaf.NotAfter) {
			return nil, fmt.Errorf("certificate %s expired on %s: download a new one from the portal's profile page",
				certName, cert.Leaf.NotAfter.Format(time.RFC3339))
		}
		if now.Before(cert.Leaf.NotBefore) {
			return nil, fmt.Errorf("certificate %s is not valid before %s (is this machine's clock right?)",
				certName, cert.Leaf.NotBefore.Format(time.RFC3339))
		}
		id := &Identity{NotAfter: cert.Leaf.NotAfter}
		if len(cert.Leaf.URIs) > 0 {
			id.UserURN = cert.Leaf.URIs[0].String()
		}
		if len(cert.Leaf.EmailAddresses) > 0 {
			id.Email = cert.Leaf.EmailAddresses[0]
		}
		c.identity = id
		// Always present the certificate, even when the master's list of acceptable CAs does
		// not name its issuer: Go would otherwise silently send none and the user would get a
		// puzzling 401 instead of the handshake error that says which certificate is wrong.
		tlsConf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &cert, nil
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsConf
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	c.http = &http.Client{Transport: tr, Timeout: timeout}
	return c, nil
}

func nameOr(name, dflt string) string {
	if name == "" {
		return dflt
	}
	return name
}

// BaseURL returns the normalised API base this client calls.
func (c *Client) BaseURL() string { return c.base.String() }

// Identity returns who the client certificate identifies, and false for an anonymous client.
func (c *Client) Identity() (Identity, bool) {
	if c.identity == nil {
		return Identity{}, false
	}
	return *c.identity, true
}

// request is one API call.
type request struct {
	method      string
	path        string // relative to the base, already escaped
	query       url.Values
	body        []byte
	contentType string
	accept      string
	header      http.Header
	// okStatus lists the non-2xx statuses the caller handles itself (e.g. 416 for logs).
	okStatus []int
}

// response is a fully read answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request and reads the whole answer. Idempotent requests (GET) are retried on
// transient failures. Any status >= 400 that the caller did not list becomes an *APIError.
func (c *Client) do(ctx context.Context, r request) (*response, error) {
	target := c.base.String() + r.path
	if len(r.query) > 0 {
		target += "?" + r.query.Encode()
	}
	attempts := 1
	if r.method == http.MethodGet {
		attempts += c.retries
	}
	var lastErr error
	for i := range attempts {
		if i > 0 {
			wait := c.retryWait << (i - 1)
			c.debugf("... retrying in %s\n", wait)
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("%s %s: %w", r.method, target, ctx.Err())
			case <-time.After(wait):
			}
		}
		resp, err := c.roundTrip(ctx, r, target)
		if err != nil {
			lastErr = err
			if !retryable(ctx, err) {
				return nil, err
			}
			continue
		}
		switch resp.status {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			lastErr = fmt.Errorf("%s %s: %w", r.method, target, decodeAPIError(resp.status, resp.body))
			continue
		}
		if resp.status >= 400 && !containsInt(r.okStatus, resp.status) {
			return nil, decodeAPIError(resp.status, resp.body)
		}
		return resp, nil
	}
	return nil, lastErr
}

func (c *Client) roundTrip(ctx context.Context, r request, target string) (*response, error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, body)
	if err != nil {
		return nil, fmt.Errorf("build request %s %s: %w", r.method, target, err)
	}
	for k, vs := range r.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	accept := r.accept
	if accept == "" {
		accept = "application/json"
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", c.userAgent)

	start := time.Now()
	if r.body != nil {
		c.debugf("--> %s %s (%d bytes)\n", r.method, target, len(r.body))
	} else {
		c.debugf("--> %s %s\n", r.method, target)
	}
	if rng := req.Header.Get("Range"); rng != "" {
		c.debugf("    Range: %s\n", rng)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.debugf("<-- %s %s: %v\n", r.method, target, err)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w", r.method, target, ctx.Err())
		}
		return nil, wrapTransportError(r.method, target, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read answer: %w", r.method, target, err)
	}
	c.debugf("<-- %s (%d bytes, %s)\n", resp.Status, len(data), time.Since(start).Round(time.Millisecond))
	if resp.StatusCode >= 400 && c.debug != nil {
		c.debugf("    %s\n", strings.TrimSpace(firstLines(string(data), 10)))
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

func (c *Client) debugf(format string, args ...any) {
	if c.debug != nil {
		_, _ = fmt.Fprintf(c.debug, format, args...)
	}
}

// retryable reports whether a failed round trip may succeed when tried again: connection
// problems yes, certificate problems and cancellations no.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if errors.Is(err, ErrServerNotTrusted) || errors.Is(err, ErrCertificateRejected) {
		return false
	}
	return true
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// SplitURN splits urn:publicid:IDN+<authority>+<type>+<name> into its parts. It returns empty
// strings for text that is not such a URN.
func SplitURN(urn string) (authority, typ, name string) {
	const prefix = "urn:publicid:IDN+"
	if len(urn) < len(prefix) || !strings.EqualFold(urn[:len(prefix)], prefix) {
		return "", "", ""
	}
	parts := strings.SplitN(urn[len(prefix):], "+", 3)
	if len(parts) != 3 {
		return "", "", ""
	}
	return parts[0], parts[1], parts[2]
}
