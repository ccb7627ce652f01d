package job

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Image is a parsed docker.image. GPULab extends Docker's reference with credentials in front
// (`user:password@registry/path:tag`), which the slave needs to pull a private image and which
// must never be shown back; parsing once here keeps every caller from cutting strings itself.
type Image struct {
	User     string // registry user, with Password; empty when the image is public
	Password string // registry password or deploy token
	Registry string // host[:port], empty for Docker Hub
	Path     string // repository path without the registry, e.g. "ilabt/gpulab/sample" or "ubuntu"
	Tag      string // empty when none was given (Docker then uses "latest")
	Digest   string // "sha256:…", empty when none was given
}

// RedactedPassword replaces registry passwords wherever an image is shown.
const RedactedPassword = "XXXX"

var (
	// Docker's reference grammar (distribution/reference), restricted to what a pull accepts.
	pathComponentRe = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)
	hostRe          = regexp.MustCompile(`^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:.]+\])(?::[0-9]{1,5})?$`)
	tagRe           = regexp.MustCompile(`^[\w][\w.-]{0,127}$`)
	digestRe        = regexp.MustCompile(`^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$`)
)

// ParseImage reads an image in one of the three forms of imec's documentation: `name[:tag]`
// (Docker Hub), `host[:port]/path/name[:tag]`, and the GPULab extension
// `user:password@host[:port]/path/name[:tag]`; `@sha256:…` digests are accepted too. Errors say
// what is wrong but never repeat the password.
func ParseImage(s string) (Image, error) {
	var img Image
	if strings.TrimSpace(s) != s || s == "" {
		if s == "" {
			return img, errors.New("image is empty")
		}
		return img, errors.New("image must not start or end with blanks")
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return img, errors.New("image must not contain blanks")
	}
	rest := s
	// A digest is the part after the last '@' when it looks like algorithm:hex.
	if i := strings.LastIndex(rest, "@"); i >= 0 && digestRe.MatchString(rest[i+1:]) {
		img.Digest = rest[i+1:]
		rest = rest[:i]
	}
	// Credentials: everything before the last remaining '@' (passwords may hold '@' and ':').
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		cred := rest[:i]
		rest = rest[i+1:]
		user, pass, ok := strings.Cut(cred, ":")
		if !ok || user == "" || pass == "" {
			return img, errors.New("credentials in an image must be written user:password@registry/path:tag")
		}
		img.User, img.Password = user, pass
	}
	if rest == "" {
		return img, errors.New("image has no repository name")
	}
	// The registry is the first component when it looks like a host (Docker's rule).
	if i := strings.Index(rest, "/"); i >= 0 {
		first := rest[:i]
		if strings.ContainsAny(first, ".:[") || first == "localhost" {
			if !hostRe.MatchString(first) {
				return img, fmt.Errorf("invalid registry host %q", first)
			}
			img.Registry = first
			rest = rest[i+1:]
		}
	}
	// The tag follows the last ':' of the last path component.
	last := strings.LastIndex(rest, "/")
	if j := strings.LastIndex(rest, ":"); j > last {
		img.Tag = rest[j+1:]
		rest = rest[:j]
		if !tagRe.MatchString(img.Tag) {
			return img, fmt.Errorf("invalid tag %q (letters, digits, '_', '.', '-'; at most 128)", img.Tag)
		}
	}
	if rest == "" {
		return img, errors.New("image has no repository name")
	}
	for _, c := range strings.Split(rest, "/") {
		if pathComponentRe.MatchString(c) {
			continue
		}
		if pathComponentRe.MatchString(strings.ToLower(c)) {
			return img, fmt.Errorf("repository name %q must be lowercase", rest)
		}
		if c == "" {
			return img, fmt.Errorf("invalid repository name %q: empty path component", rest)
		}
		return img, fmt.Errorf("invalid repository name %q: %q may only hold lowercase letters, digits and single '.', '_' or '-' between them", rest, c)
	}
	img.Path = rest
	if n := len(img.Registry) + 1 + len(img.Path); n > 255 {
		return img, errors.New("repository name is longer than 255 characters")
	}
	return img, nil
}

// HasCredentials reports whether the image carries a registry user and password.
func (i Image) HasCredentials() bool { return i.User != "" || i.Password != "" }

// Reference is the image as Docker pulls it: the reference without the credentials (those are
// passed to the pull separately).
func (i Image) Reference() string {
	var b strings.Builder
	if i.Registry != "" {
		b.WriteString(i.Registry)
		b.WriteByte('/')
	}
	b.WriteString(i.Path)
	if i.Tag != "" {
		b.WriteByte(':')
		b.WriteString(i.Tag)
	}
	if i.Digest != "" {
		b.WriteByte('@')
		b.WriteString(i.Digest)
	}
	return b.String()
}

// Redacted is the image as people see it: with credentials, the user stays visible (it tells
// which deploy token is used) and the password becomes XXXX ("user:XXXX@host/path:tag").
func (i Image) Redacted() string {
	if !i.HasCredentials() {
		return i.Reference()
	}
	return i.User + ":" + RedactedPassword + "@" + i.Reference()
}

// String is Redacted, so that an Image printed by accident leaks nothing.
func (i Image) String() string { return i.Redacted() }

// redactImage hides the password of an image string, also one that does not parse (a stored
// job written by an older version, or a value on its way to an error message): whatever sits
// between the first ':' and the last '@' before the repository is treated as a password.
func redactImage(s string) string {
	if img, err := ParseImage(s); err == nil {
		if img.HasCredentials() {
			return img.Redacted()
		}
		return s
	}
	rest := s
	if i := strings.LastIndex(rest, "@"); i >= 0 && digestRe.MatchString(rest[i+1:]) {
		rest = rest[:i]
	}
	i := strings.LastIndex(rest, "@")
	if i < 0 {
		return s
	}
	user, _, _ := strings.Cut(rest[:i], ":")
	return user + ":" + RedactedPassword + s[i:]
}
