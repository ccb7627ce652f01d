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
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/opengpulab/gpulab/pki"
)

// Config says which master to talk to and how to authenticate.
type Config struct {
	// BaseURL is the API base (see NormalizeBaseURL for the forms accepted); empty means
	// DefaultBaseURL. Several masters (sharing one database) are given separated by commas:
	// the client moves on to the next when one cannot be reached or answers 502, 503 or 504,
	// and keeps using the one that answered.
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
	// RetryMaxTime bounds the time one call spends retrying (see Client): 0 means
	// DefaultRetryMaxTime, a negative value turns retries off (the other masters of BaseURL
	// are still tried once).
	RetryMaxTime time.Duration
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

// DefaultRetryMaxTime is how long one call keeps retrying by default: long enough to ride out
// a master or database restart, short enough that a script learns of a real outage.
const DefaultRetryMaxTime = time.Minute

// Back-off between retries: exponential from retryFirstWait, doubling, at most retryMaxWait,
// each wait drawn at random within ±50 % (jitter), so that the clients of a master that
// comes back do not all return at once. A Retry-After from the master is honoured up to
// maxRetryAfter (and never beyond the call's RetryMaxTime).
const (
	retryFirstWait = 250 * time.Millisecond
	retryMaxWait   = 10 * time.Second
	maxRetryAfter  = 30 * time.Second
)

// Client calls a master's API. It is safe for concurrent use.
//
// A call that fails in a way that may pass (Temporary: the master unreachable, the
// connection lost, 502, 503, 504) is tried again with exponential back-off and jitter, for at
// most Config.RetryMaxTime, moving through the configured masters. Requests that may be
// repeated safely (GET, PUT, DELETE, a conversion, a submit) are retried on any such failure:
// a submit carries an Idempotency-Key, and the master answers a repeat with the job the first
// attempt made. A request that may not be repeated whose answer was lost fails with
// ErrOutcomeUnknown.
type Client struct {
	bases []*url.URL
	// cur is the index in bases of the master to try first: the one that answered last.
	cur       atomic.Int32
	http      *http.Client
	identity  *Identity
	debug     io.Writer
	userAgent string
	// retryMax bounds the retries of one call (0: none); retryWait is the first back-off.
	retryMax  time.Duration
	retryWait time.Duration
}

// New checks the configuration (the URL, the PEM and its password, the CA file) and builds a
// client. It fails early, with a message naming the file at fault, rather than on the first call.
func New(cfg Config) (*Client, error) {
	bases, err := ParseBaseURLs(cfg.BaseURL)
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
		bases:     bases,
		debug:     cfg.Debug,
		userAgent: cfg.UserAgent,
		retryMax:  cfg.RetryMaxTime,
		retryWait: retryFirstWait,
	}
	switch {
	case c.retryMax == 0:
		c.retryMax = DefaultRetryMaxTime
	case c.retryMax < 0:
		c.retryMax = 0
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

// BaseURL returns the normalised API base this client calls now: the master that answered
// last, or the first one configured.
func (c *Client) BaseURL() string { return c.bases[c.cur.Load()].String() }

// BaseURLs returns every configured API base, in the order given.
func (c *Client) BaseURLs() []string {
	out := make([]string, len(c.bases))
	for i, b := range c.bases {
		out[i] = b.String()
	}
	return out
}

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
	// replayable marks a POST that may be repeated safely (a conversion changes nothing).
	replayable bool
	// repeated, when set, is told whether the request was sent again after an attempt that
	// the master may have carried out (its answer lost, or a proxy's 502 or 504): a state
	// change then meets its own effect, which the caller may recognise.
	repeated *bool
}

// idempotent reports whether the request may be sent again after an unknown outcome.
func (r request) idempotent() bool { return r.method != http.MethodPost || r.replayable }

// response is a fully read answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request and reads the whole answer, retrying as the Client's documentation says.
// Any status >= 400 that the caller did not list becomes an *APIError.
func (c *Client) do(ctx context.Context, r request) (*response, error) {
	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(c.retryWait),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMaxInterval(retryMaxWait),
		backoff.WithMaxElapsedTime(c.retryMax),
	)
	n := int32(len(c.bases))
	failedInRound := int32(0) // masters that failed since the last wait
	for attempt := 1; ; attempt++ {
		i := c.cur.Load()
		target := c.bases[i].String() + r.path
		if len(r.query) > 0 {
			target += "?" + r.query.Encode()
		}
		resp, sent, err := c.roundTrip(ctx, r, target)
		var retryAfter time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil || !Temporary(err) {
				return nil, err
			}
			if sent && !r.idempotent() {
				return nil, fmt.Errorf("%w (%w)", err, ErrOutcomeUnknown)
			}
			if sent && r.repeated != nil {
				*r.repeated = true
			}
		case isGatewayStatus(resp.status):
			err = fmt.Errorf("%s %s: %w", r.method, target, decodeAPIError(resp.status, resp.body))
			if resp.status != http.StatusServiceUnavailable {
				// A proxy's 502 or 504 says nothing of whether a master got the request.
				if !r.idempotent() {
					return nil, fmt.Errorf("%w (%w)", err, ErrOutcomeUnknown)
				}
				if r.repeated != nil {
					*r.repeated = true
				}
			}
			retryAfter = parseRetryAfter(resp.header.Get("Retry-After"), time.Now())
		default:
			c.cur.Store(i)
			if resp.status >= 400 && !containsInt(r.okStatus, resp.status) {
				return nil, decodeAPIError(resp.status, resp.body)
			}
			return resp, nil
		}
		// Try the next master at once (even with retries off: that is no retry of the same
		// master); wait only when every master failed since the last wait.
		next := (i + 1) % n
		c.cur.CompareAndSwap(i, next)
		failedInRound++
		if failedInRound < n {
			c.debugf("... %v; trying %s\n", oneLine(err), c.bases[next])
			continue
		}
		if c.retryMax <= 0 {
			return nil, err
		}
		failedInRound = 0
		left := c.retryMax - bo.GetElapsedTime()
		if left <= 0 {
			c.debugf("... giving up after %d attempts in %s\n", attempt, bo.GetElapsedTime().Round(time.Millisecond))
			return nil, err
		}
		wait := bo.NextBackOff()
		if wait == backoff.Stop {
			wait = left // one last try when the time is up
		}
		wait = min(max(wait, min(retryAfter, maxRetryAfter)), left)
		c.debugf("... %v; retrying in %s (attempt %d, retrying for at most %s)\n",
			oneLine(err), wait.Round(time.Millisecond), attempt+1, c.retryMax)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%s %s: %w", r.method, target, ctx.Err())
		case <-t.C:
		}
	}
}

// isGatewayStatus reports the answers that mean "not now, maybe elsewhere": 502 and 504 from a
// proxy without a master behind it, 503 from a master whose database is down.
func isGatewayStatus(status int) bool {
	switch status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// parseRetryAfter reads a Retry-After header: seconds, or an HTTP date. 0 when absent or
// unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		return time.Duration(min(max(secs, 0), 24*3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// oneLine shortens an error to its first line, for the debug log.
func oneLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// roundTrip sends one request and reads its answer. sent is false only when the request
// certainly did not leave this machine: no connection to the master was ever made for it.
func (c *Client) roundTrip(ctx context.Context, r request, target string) (_ *response, sent bool, _ error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	var gotConn atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) }})
	req, err := http.NewRequestWithContext(ctx, r.method, target, body)
	if err != nil {
		return nil, false, fmt.Errorf("build request %s %s: %w", r.method, target, err)
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
			return nil, gotConn.Load(), fmt.Errorf("%s %s: %w", r.method, target, ctx.Err())
		}
		return nil, gotConn.Load(), wrapTransportError(r.method, target, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, true, fmt.Errorf("%s %s: read answer: %w: %w", r.method, target, ErrConnectionLost, err)
	}
	c.debugf("<-- %s (%d bytes, %s)\n", resp.Status, len(data), time.Since(start).Round(time.Millisecond))
	if resp.StatusCode >= 400 && c.debug != nil {
		c.debugf("    %s\n", strings.TrimSpace(firstLines(string(data), 10)))
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}, true, nil
}

func (c *Client) debugf(format string, args ...any) {
	if c.debug != nil {
		_, _ = fmt.Fprintf(c.debug, format, args...)
	}
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
