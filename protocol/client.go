package protocol

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Client is the slave's side of Master over HTTPS with the slave's client certificate. It knows
// one or more master URLs (masters share one database, so any of them serves the slave) and
// moves to the next one when a call finds its master unreachable or unable to answer (5xx).
type Client struct {
	bases []string
	cur   atomic.Int32 // index into bases of the master in use
	http  *http.Client

	mu      sync.Mutex
	contact time.Time // the last answer of a master that could act on it (any status < 500)
}

var _ Master = (*Client)(nil)

// NewClient makes a client of the masters at baseURLs (https://host:port, several separated by
// commas), trusting caPEM and presenting cert.
func NewClient(baseURLs string, caPEM []byte, cert *tls.Certificate) (*Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("master CA: no PEM certificate found")
	}
	// Sessions are resumed: a slave opens a connection for each call beyond the few it keeps
	// (a burst of job updates), and a full handshake with certificates on both sides was a
	// tenth of the master's CPU in B2x (1,000 slaves). A resumed session keeps the slave's
	// verified certificate; the master still looks its serial up at every call (revocation).
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(0)}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	var bases []string
	for _, b := range strings.Split(baseURLs, ",") {
		if b = strings.TrimRight(strings.TrimSpace(b), "/"); b != "" {
			bases = append(bases, b)
		}
	}
	if len(bases) == 0 {
		return nil, errors.New("no master URL")
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 15 * time.Second}
	return &Client{
		bases: bases,
		// No overall timeout: Next long-polls; each call has its own context deadline.
		// HTTP/2 when the master offers it: every call on one connection (see web.Server's
		// TLSConfig). A connection that stops answering (a master frozen, a link cut without a
		// reset) is pinged after 15 s of silence and closed when the ping gets no answer, so
		// that later calls dial again instead of waiting on it; HTTP/1.1 closed a connection
		// whose call timed out, HTTP/2 only gives that call's stream up.
		http: &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DialContext: dialer.DialContext, ForceAttemptHTTP2: true,
			HTTP2:               &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 10 * time.Second},
			TLSHandshakeTimeout: 10 * time.Second, MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second}},
	}, nil
}

// WrapTransport wraps the client's HTTP transport (to time its calls for metrics). Call it
// before the first call.
func (c *Client) WrapTransport(wrap func(http.RoundTripper) http.RoundTripper) {
	c.http.Transport = wrap(c.http.Transport)
}

// LastContact is when a master last answered a call in a way that shows it could act (any
// answer but a 5xx): what the slave's self-fencing measures. Zero before the first answer.
func (c *Client) LastContact() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.contact
}

// Master is the URL of the master in use.
func (c *Client) Master() string { return c.bases[int(c.cur.Load())%len(c.bases)] }

// Join exchanges a one-time token and a CSR for a certificate (no client certificate needed).
func (c *Client) Join(ctx context.Context, req JoinRequest) (JoinReply, error) {
	var out JoinReply
	err := c.call(ctx, JoinPath, req, &out, 30*time.Second)
	return out, err
}

// Register implements Master.
func (c *Client) Register(ctx context.Context, inv Inventory) (Registration, error) {
	inv.GPUStatus = CleanReason(inv.GPUStatus)
	var out Registration
	err := c.call(ctx, RegisterPath, inv, &out, 30*time.Second)
	return out, err
}

// Heartbeat implements Master.
func (c *Client) Heartbeat(ctx context.Context, hb Heartbeat) (HeartbeatReply, error) {
	var out HeartbeatReply
	err := c.call(ctx, HeartbeatPath, hb, &out, 30*time.Second)
	return out, err
}

// Next implements Master.
func (c *Client) Next(ctx context.Context, req NextRequest) (Work, error) {
	var out Work
	err := c.call(ctx, NextPath, req, &out, req.Wait+30*time.Second)
	return out, err
}

// Update implements Master.
func (c *Client) Update(ctx context.Context, u StateUpdate) error {
	u.Reason = CleanReason(u.Reason)
	return c.call(ctx, UpdatePath, u, nil, 30*time.Second)
}

// Log implements Master.
func (c *Client) Log(ctx context.Context, chunk LogChunk) error {
	return c.call(ctx, LogPath, chunk, nil, time.Minute)
}

// LogState implements Master.
func (c *Client) LogState(ctx context.Context, jobUUID string) (LogState, error) {
	var out LogState
	err := c.call(ctx, LogStatePath, map[string]string{"jobUuid": jobUUID}, &out, 30*time.Second)
	return out, err
}

// Done implements Master.
func (c *Client) Done(ctx context.Context, d Completion) error {
	d.Reason = CleanReason(d.Reason)
	return c.call(ctx, DonePath, d, nil, 30*time.Second)
}

// SSHAuth asks whether a key may log in to a job over SSH (not part of Master: only the slave's
// SSH server asks it). A refusal is an answer with Allowed false, not an error.
func (c *Client) SSHAuth(ctx context.Context, req SSHAuthRequest) (SSHAuthAnswer, error) {
	var out SSHAuthAnswer
	err := c.call(ctx, SSHAuthPath, req, &out, 15*time.Second)
	return out, err
}

// StatusError is an answer of the master that is not a success.
type StatusError struct {
	Status  int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("master answered %d: %s", e.Status, e.Message)
}

// Unwrap maps status codes to the protocol's sentinel errors.
func (e *StatusError) Unwrap() error {
	switch e.Status {
	case http.StatusConflict:
		return ErrConflict
	case http.StatusNotFound:
		return ErrNotFound
	}
	return nil
}

// Refused reports whether the master refused the slave's credentials (401: a revoked
// certificate; 403: not a slave's): such an answer is no contact for the self-fencing, and the
// next call tries the next master.
func (e *StatusError) Refused() bool {
	return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
}

// Temporary reports whether a retry may succeed (5xx, 429).
func (e *StatusError) Temporary() bool {
	return e.Status >= 500 || e.Status == http.StatusTooManyRequests
}

func (c *Client) call(ctx context.Context, path string, in, out any, timeout time.Duration) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	i := int(c.cur.Load()) % len(c.bases)
	base := c.bases[i]
	failed := func() {
		// The next call tries the next master; a concurrent call that moved on already wins.
		c.cur.CompareAndSwap(int32(i), int32((i+1)%len(c.bases)))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			failed()
		}
		return fmt.Errorf("%s at %s: %w", path, base, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		failed()
		return fmt.Errorf("%s at %s: read answer: %w", path, base, err)
	}
	refused := resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden
	if resp.StatusCode < 500 && !refused {
		c.mu.Lock()
		c.contact = time.Now()
		c.mu.Unlock()
	} else {
		failed()
	}
	if resp.StatusCode/100 != 2 {
		var e Conflict
		_ = json.Unmarshal(data, &e)
		if e.Message == "" {
			e.Message = strings.TrimSpace(string(data))
		}
		if resp.StatusCode == http.StatusConflict && e.JobUUID != "" {
			return fmt.Errorf("%s: %w", path, &e)
		}
		return fmt.Errorf("%s at %s: %w", path, base, &StatusError{Status: resp.StatusCode, Message: e.Message})
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s: decode answer: %w", path, err)
		}
	}
	return nil
}
