package pki

import (
	"fmt"
	"regexp"
	"strings"
)

// URN is a GPULab identity: urn:publicid:IDN+<authority>+<type>+<name>, as imec uses for users
// ("user") and projects ("project"). Slaves use the type "slave".
type URN struct {
	Authority string
	Type      string
	Name      string
}

func (u URN) String() string {
	return "urn:publicid:IDN+" + u.Authority + "+" + u.Type + "+" + u.Name
}

// MiniID is the short form shown in lists: <name>@<first label of the authority>.
func (u URN) MiniID() string {
	short, _, _ := strings.Cut(u.Authority, ".")
	return u.Name + "@" + short
}

// NamePattern is what user, project and slave names may look like: they end up in URNs, in
// storage paths and in container labels, so they are kept plain.
var NamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// UserURN makes the URN of a user.
func UserURN(authority, name string) string { return URN{authority, "user", name}.String() }

// ServiceURN makes the URN of a service identity (issue 13).
func ServiceURN(authority, name string) string { return URN{authority, "service", name}.String() }

// ProjectURN makes the URN of a project.
func ProjectURN(authority, name string) string { return URN{authority, "project", name}.String() }

// ParseURN reads a urn:publicid:IDN+authority+type+name URN.
func ParseURN(s string) (URN, error) {
	rest, ok := strings.CutPrefix(s, "urn:publicid:IDN+")
	if !ok {
		return URN{}, fmt.Errorf("%q is not a urn:publicid:IDN+ URN", s)
	}
	parts := strings.Split(rest, "+")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return URN{}, fmt.Errorf("%q must look like urn:publicid:IDN+<authority>+<type>+<name>", s)
	}
	return URN{Authority: parts[0], Type: parts[1], Name: parts[2]}, nil
}
