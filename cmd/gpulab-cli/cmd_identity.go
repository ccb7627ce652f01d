package main

import (
	"strings"
	"time"
)

// certs and admin: the caller's certificates (list, revoke by serial) and, for admins, users
// and slaves (disable, enable). Issue 10.

func (a *app) cmdCerts(args []string) error {
	fs := newFlagSet("certs", "gpulab-cli certs [list | revoke SERIAL]",
		"List your API certificates (serial, expiry, state; an admin sees every certificate), or\n"+
			"revoke one by its serial: it is refused at its next request, at every master. To renew a\n"+
			"certificate, download a new one from the portal's Profile page, then revoke the old one.")
	pos, err := a.parseCommand(fs, args)
	if err != nil {
		return err
	}
	cl, err := a.client(true)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0 || (len(pos) == 1 && pos[0] == "list"):
		certs, err := cl.Certificates(a.ctx)
		if err != nil {
			return err
		}
		t := &table{cols: []column{{title: "Serial"}, {title: "Kind"}, {title: "Owner"}, {title: "Expires"}, {title: "State"}}}
		for _, c := range certs {
			t.add(c.Serial, c.Kind, c.Owner, c.NotAfter.UTC().Format(time.DateTime), c.State)
		}
		t.render(a.stdout, false)
		return nil
	case len(pos) == 2 && pos[0] == "revoke":
		c, err := cl.RevokeCertificate(a.ctx, pos[1])
		if err != nil {
			return err
		}
		a.stdout.printf("certificate %s of %s: %s\n", c.Serial, c.Owner, c.State)
		return nil
	}
	return usagef("certs takes `list` or `revoke SERIAL`")
}

func (a *app) cmdAdmin(args []string) error {
	fs := newFlagSet("admin", "gpulab-cli admin users | disable-user NAME | enable-user NAME | disable-slave NAME | enable-slave NAME",
		"Admins only. List users with their login and state; disable a user (refused at his next\n"+
			"request, at every master) or enable him again; disable a slave (it gets no jobs and no job\n"+
			"secrets, its untaken jobs are queued again) or enable it again.")
	pos, err := a.parseCommand(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("admin needs a subcommand: users, disable-user, enable-user, disable-slave or enable-slave")
	}
	cl, err := a.client(true)
	if err != nil {
		return err
	}
	if pos[0] == "users" && len(pos) == 1 {
		users, err := cl.Users(a.ctx)
		if err != nil {
			return err
		}
		t := &table{cols: []column{{title: "Name"}, {title: "E-mail"}, {title: "Admin"}, {title: "Disabled"}, {title: "Login"}}}
		for _, u := range users {
			login := "-"
			if u.Subject != "" {
				login = u.Issuer + "#" + u.Subject
			}
			t.add(u.Name, u.Email, yesNo(u.IsAdmin), yesNo(u.Disabled), login)
		}
		t.render(a.stdout, false)
		return nil
	}
	if len(pos) != 2 {
		return usagef("admin %s needs exactly one name", pos[0])
	}
	name := pos[1]
	switch pos[0] {
	case "disable-user", "enable-user":
		err = cl.SetUserDisabled(a.ctx, name, strings.HasPrefix(pos[0], "disable"))
	case "disable-slave", "enable-slave":
		err = cl.SetSlaveDisabled(a.ctx, name, strings.HasPrefix(pos[0], "disable"))
	default:
		return usagef("unknown admin subcommand %q", pos[0])
	}
	if err != nil {
		return err
	}
	a.stdout.printf("%s %s: done\n", strings.TrimSuffix(strings.TrimSuffix(pos[0], "-user"), "-slave")+"d", name)
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
