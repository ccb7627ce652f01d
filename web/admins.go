package web

import (
	"fmt"
	"strings"

	"github.com/opengpulab/gpulab/store"
)

// AdminSet is the configuration's list of admins. A bare user name is not accepted: anybody
// can call himself "alice" at some identity provider. An admin is named by an e-mail address
// (which must be verified by the provider) or by the provider's issuer and subject.
type AdminSet struct {
	emails   map[string]bool // lower-cased
	subjects map[string]bool // issuer + "#" + subject
}

// ParseAdmins checks the configured admins: each entry is an e-mail address (user@host) or
// ISSUER#SUBJECT (the OpenID provider's issuer URL and the user's subject there, as
// `gpulab-master user list` shows them). A bare name is an error.
func ParseAdmins(entries []string) (AdminSet, error) {
	set := AdminSet{emails: map[string]bool{}, subjects: map[string]bool{}}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
		case strings.Contains(e, "#"):
			iss, sub, _ := strings.Cut(e, "#")
			if iss == "" || sub == "" {
				return set, fmt.Errorf("admin %q: ISSUER#SUBJECT needs both parts", e)
			}
			set.subjects[e] = true
		case strings.Count(e, "@") == 1 && !strings.HasPrefix(e, "@") && !strings.HasSuffix(e, "@"):
			set.emails[strings.ToLower(e)] = true
		default:
			return set, fmt.Errorf("admin %q is a bare name: name admins by verified e-mail (alice@example.org) "+
				"or by ISSUER#SUBJECT of their OpenID login (see `gpulab-master user list`); a name can be taken by anybody at another provider", e)
		}
	}
	return set, nil
}

// match reports whether the configuration names u as an admin.
func (a AdminSet) match(u store.User) bool {
	if u.Subject != "" && a.subjects[u.Issuer+"#"+u.Subject] {
		return true
	}
	return u.EmailVerified && u.Email != "" && a.emails[strings.ToLower(u.Email)]
}
