package client

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// DefaultBaseURL is the API base used when none is configured: the master that `make run`
// starts on this machine. Production users set --custom-master-url or GPULAB_API_BASE.
const DefaultBaseURL = "https://localhost:8443/api/gpulab/v3.1/"

// apiPath is appended to a master URL that names no API version.
const apiPath = "api/gpulab/v3.1/"

var versionedAPIPath = regexp.MustCompile(`/api/gpulab/v[0-9]+\.[0-9]+/?$`)

// imecAPIPath is the base of imec's own client, which this client does not use (see README,
// "API versions").
var imecAPIPath = regexp.MustCompile(`/api/gpulab/v4\.0/?$`)

// NormalizeBaseURL turns what a user may type as the master's address into the API base with a
// trailing slash, so that request paths can simply be appended. It accepts the full API base
// (`https://host:8443/api/gpulab/v3.1`), imec's form ending in `/api` (what imec's
// --custom-master-url and GPULAB_API_BASE expect), or just the master (`https://host:8443`);
// a missing scheme means https. A v4.0 base becomes v3.1: v4.0 is imec's shape for imec's
// client, v3.1 ours.
func NormalizeBaseURL(raw string) (*url.URL, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		s = DefaultBaseURL
	}
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("master URL %q: %w", raw, err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, fmt.Errorf("master URL %q: scheme must be https", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("master URL %q: no host", raw)
	}
	u.RawQuery, u.Fragment, u.RawPath = "", "", ""
	p := u.Path
	switch {
	case imecAPIPath.MatchString(p):
		// imec's v4.0 answers exactly imec's models, without what this client reads (estimated
		// start, exit code, ...): the same master's v3.1 has it all.
		p = imecAPIPath.ReplaceAllString(p, "/api/gpulab/v3.1/")
	case versionedAPIPath.MatchString(p):
		// Already the API base.
	case strings.HasSuffix(strings.TrimSuffix(p, "/"), "/api"):
		p = strings.TrimSuffix(p, "/") + "/gpulab/v3.1"
	default:
		p = strings.TrimSuffix(p, "/") + "/" + strings.TrimSuffix(apiPath, "/")
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	u.Path = p
	return u, nil
}

// ParseBaseURLs reads a list of API bases separated by commas (several masters sharing one
// database), normalising each as NormalizeBaseURL does and dropping repeats. An empty list
// means DefaultBaseURL; a single URL is the common case and works exactly as before.
func ParseBaseURLs(raw string) ([]*url.URL, error) {
	var out []*url.URL
	seen := map[string]bool{}
	for _, part := range strings.Split(raw, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		u, err := NormalizeBaseURL(part)
		if err != nil {
			return nil, err
		}
		if !seen[u.String()] {
			seen[u.String()] = true
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		u, err := NormalizeBaseURL("")
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}
