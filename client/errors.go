package client

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"syscall"

	"github.com/opengpulab/gpulab/pki"
)

// Sentinel errors that callers branch on (to prompt for a password, or to add a hint naming
// their own flags). They are wrapped with the details of the failure.
var (
	// ErrPasswordRequired means the certificate's key is encrypted and no password was given.
	ErrPasswordRequired = pki.ErrPasswordNeeded
	// ErrWrongPassword means the password given does not decrypt the certificate's key.
	ErrWrongPassword = pki.ErrWrongPassword
	// ErrServerNotTrusted means the master's TLS certificate could not be verified: it is
	// typically signed by the master's own CA, which must then be passed as Config.ServerCA.
	ErrServerNotTrusted = errors.New("the master's certificate is not trusted")
	// ErrCertificateRejected means the master refused the client certificate during the TLS
	// handshake (issued by another CA, expired or revoked).
	ErrCertificateRejected = errors.New("the master rejected the client certificate")
	// ErrUnreachable means no connection could be made to the master at all.
	ErrUnreachable = errors.New("cannot reach the master")
	// ErrConnectionLost means the connection broke, or the master did not answer in time,
	// after the request may have been sent.
	ErrConnectionLost = errors.New("lost the connection to the master")
	// ErrOutcomeUnknown marks a request that is not safe to repeat whose answer was
	// lost: the master may have carried it out. It is not retried; the caller should look
	// before trying again.
	ErrOutcomeUnknown = errors.New("the master may have carried it out all the same")

	// errNotTLS is a server answering in plain HTTP: a wrong URL, not an outage.
	errNotTLS = errors.New("the server does not speak TLS (is it an http:// URL?)")
)

// Temporary reports whether err is a failure that may pass by itself: the master could not
// be reached or the connection was lost (ErrUnreachable, ErrConnectionLost, but not a URL
// that names a plain-HTTP server), or it answered 502, 503 or 504 (a proxy without a master
// behind it, or a master whose database is down). The client retries such failures itself
// within Config.RetryMaxTime; callers that wait longer (gpulab-cli wait) keep going through
// them.
func Temporary(err error) bool {
	switch StatusCode(err) {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	if errors.Is(err, errNotTLS) {
		return false
	}
	return errors.Is(err, ErrUnreachable) || errors.Is(err, ErrConnectionLost)
}

// APIError is an error answer of the API. The master reports every problem of a request at
// once, each with the path of the field at fault, so it keeps them all.
type APIError struct {
	// Status is the HTTP status code (400, 401, 403, 404, 409, ...).
	Status int
	// Message is the API's "error" text, or the response text when it was not JSON.
	Message string
	// Details lists the individual problems (validation errors name the field path).
	Details []Detail
}

// Detail is one problem of an API error, usually about one field of the job request.
type Detail struct {
	Path    string `json:"path,omitempty"`
	Message string `json:"message"`
}

// Error prints the message followed by one indented `path: message` line per detail, which is
// how the CLI shows validation errors. A lone detail that only repeats the message is left out.
func (e *APIError) Error() string {
	var b strings.Builder
	msg := e.Message
	if msg == "" {
		msg = fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status))
	}
	b.WriteString(msg)
	for _, d := range e.Details {
		line := d.Message
		if d.Path != "" {
			line = d.Path + ": " + d.Message
		}
		if len(e.Details) == 1 && (line == msg || d.Message == msg) {
			continue
		}
		b.WriteString("\n  ")
		b.WriteString(line)
	}
	return b.String()
}

// StatusCode returns the HTTP status of an API error anywhere in err's chain, or 0. It lets
// callers treat "not found" or "conflict" differently without string matching.
func StatusCode(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// decodeAPIError builds an APIError from an error response. It reads GPULab's
// `{"error", "details"}` and, to stay useful against other servers and proxies, also
// `{"message"}` / `{"detail"}` bodies and plain text.
func decodeAPIError(status int, body []byte) *APIError {
	e := &APIError{Status: status}
	var doc struct {
		Error   json.RawMessage   `json:"error"`
		Message string            `json:"message"`
		Detail  string            `json:"detail"`
		Details []json.RawMessage `json:"details"`
	}
	trimmed := strings.TrimSpace(string(body))
	if err := json.Unmarshal(body, &doc); err != nil || !strings.HasPrefix(trimmed, "{") {
		e.Message = firstLines(trimmed, 5)
		return e
	}
	var s string
	switch {
	case len(doc.Error) > 0 && json.Unmarshal(doc.Error, &s) == nil:
		e.Message = s
	case len(doc.Error) > 0:
		// Some servers nest the error: {"error": {"message": ...}}.
		var nested struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(doc.Error, &nested) == nil && nested.Message != "" {
			e.Message = nested.Message
		} else {
			e.Message = string(doc.Error)
		}
	case doc.Message != "":
		e.Message = doc.Message
	case doc.Detail != "":
		e.Message = doc.Detail
	}
	for _, raw := range doc.Details {
		var d Detail
		if json.Unmarshal(raw, &d) == nil && (d.Message != "" || d.Path != "") {
			e.Details = append(e.Details, d)
			continue
		}
		var text string
		if json.Unmarshal(raw, &text) == nil {
			e.Details = append(e.Details, Detail{Message: text})
			continue
		}
		e.Details = append(e.Details, Detail{Message: string(raw)})
	}
	return e
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n")
}

// wrapTransportError classifies a failed round trip so that callers can give the right hint:
// an untrusted server certificate, a refused client certificate, or an unreachable master.
func wrapTransportError(method, target string, err error) error {
	var (
		unknownCA   x509.UnknownAuthorityError
		hostErr     x509.HostnameError
		invalidErr  x509.CertificateInvalidError
		verifyErr   *tls.CertificateVerificationError
		alert       tls.AlertError
		opErr       *net.OpError
		dnsErr      *net.DNSError
		recordError tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &unknownCA):
		return fmt.Errorf("%s %s: %w: %w", method, target, ErrServerNotTrusted, unknownCA)
	case errors.As(err, &hostErr):
		return fmt.Errorf("%s %s: %w: %w", method, target, ErrServerNotTrusted, hostErr)
	case errors.As(err, &invalidErr):
		return fmt.Errorf("%s %s: %w: %w", method, target, ErrServerNotTrusted, invalidErr)
	case errors.As(err, &verifyErr):
		return fmt.Errorf("%s %s: %w: %w", method, target, ErrServerNotTrusted, verifyErr.Err)
	case errors.As(err, &alert) && isClientCertAlert(uint8(alert)):
		return fmt.Errorf("%s %s: %w (%w)", method, target, ErrCertificateRejected, alert)
	case errors.As(err, &opErr) && opErr.Op == "remote error" && isClientCertAlert(alertCode(opErr.Err)):
		return fmt.Errorf("%s %s: %w (%w)", method, target, ErrCertificateRejected, opErr.Err)
	case errors.As(err, &recordError):
		return fmt.Errorf("%s %s: %w: %w", method, target, ErrUnreachable, errNotTLS)
	case errors.As(err, &dnsErr):
		return fmt.Errorf("%s %s: %w: %w", method, target, ErrUnreachable, dnsErr)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%s %s: %w: connection refused (is the master running?)", method, target, ErrUnreachable)
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return fmt.Errorf("%s %s: %w: %w", method, target, ErrUnreachable, opErr)
	}
	// The connection was reset or closed before the answer, or the answer did not come in time.
	return fmt.Errorf("%s %s: %w: %w", method, target, ErrConnectionLost, err)
}

// isClientCertAlert reports whether a TLS alert from the server is its verdict on our client
// certificate (bad_certificate 42, unsupported 43, revoked 44, expired 45, unknown 46,
// unknown_ca 48, certificate_required 116).
func isClientCertAlert(a uint8) bool {
	switch a {
	case 42, 43, 44, 45, 46, 48, 116:
		return true
	}
	return false
}

// alertCode reads the alert number from the error crypto/tls returns for an alert received from
// the peer: a net.OpError "remote error" around an unexported uint8 type, which errors.As cannot
// name. It returns 0 for anything else.
func alertCode(err error) uint8 {
	v := reflect.ValueOf(err)
	if v.IsValid() && v.Kind() == reflect.Uint8 {
		return uint8(v.Uint())
	}
	return 0
}
