package handlers

import "context"

const csrfKey ctxKey = 100

// WithCSRFToken returns a context carrying the session's CSRF token, set by web's session
// middleware so every portal form and htmx request can include it.
func WithCSRFToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, csrfKey, token)
}

// CSRFToken returns the request's CSRF token ("" when the caller has no browser session).
func CSRFToken(ctx context.Context) string {
	t, _ := ctx.Value(csrfKey).(string)
	return t
}

// CSRFFieldName is the form field (and CSRFHeaderName the htmx header) carrying the token.
const (
	CSRFFieldName  = "csrf_token"
	CSRFHeaderName = "X-CSRF-Token"
)
