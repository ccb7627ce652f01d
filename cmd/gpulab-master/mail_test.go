package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMailConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "pw")
	if err := os.WriteFile(good, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte("s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
		check   func(t *testing.T, c *config)
	}{
		{name: "off without a host", args: nil},
		{name: "defaults", args: []string{"--smtp-host", "mx", "--smtp-from", "gpulab@example.org", "--hostnames", "gpulab.example.org"},
			check: func(t *testing.T, c *config) {
				m, ok, err := c.mailConfig()
				if err != nil || !ok || m.SMTP.Port != 587 || m.SMTP.TLS != "starttls" || m.PublicURL != "https://gpulab.example.org:8443" || m.ReminderAt != 0.8 {
					t.Errorf("config %+v, %v, %v", m, ok, err)
				}
			}},
		{name: "from the environment", env: map[string]string{"GPULAB_SMTP_HOST": "mx", "GPULAB_SMTP_TLS": "tls", "GPULAB_SMTP_FROM": "g@example.org",
			"GPULAB_SMTP_USER": "u", "GPULAB_SMTP_PASSWORD_FILE": good, "GPULAB_PUBLIC_URL": "https://portal.example.org/", "GPULAB_REMINDER_AT": "0"},
			check: func(t *testing.T, c *config) {
				m, ok, err := c.mailConfig()
				if err != nil || !ok || m.SMTP.Port != 465 || m.SMTP.Password != "s3cret" || m.PublicURL != "https://portal.example.org" || m.ReminderAt != 0 {
					t.Errorf("config %+v, %v, %v", m, ok, err)
				}
			}},
		{name: "bad tls", args: []string{"--smtp-host", "mx", "--smtp-from", "g@example.org", "--smtp-tls", "ssl"}, wantErr: "--smtp-tls"},
		{name: "no from", args: []string{"--smtp-host", "mx"}, wantErr: "--smtp-from"},
		{name: "user without password", args: []string{"--smtp-host", "mx", "--smtp-from", "g@example.org", "--smtp-user", "u"}, wantErr: "--smtp-password-file"},
		{name: "password file readable by others", args: []string{"--smtp-host", "mx", "--smtp-from", "g@example.org", "--smtp-user", "u", "--smtp-password-file", open},
			wantErr: "chmod 600"},
		{name: "reminder share", args: []string{"--smtp-host", "mx", "--smtp-from", "g@example.org", "--reminder-at", "1.5"}, wantErr: "--reminder-at"},
		{name: "public url", args: []string{"--smtp-host", "mx", "--smtp-from", "g@example.org", "--public-url", "portal"}, wantErr: "--public-url"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cfg config
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			getenv := func(k string) string { return c.env[k] }
			cfg.addCommon(fs, getenv)
			cfg.addServe(fs, getenv)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			_, on, err := cfg.mailConfig()
			switch {
			case c.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Errorf("error %v, want one naming %s", err, c.wantErr)
				}
			case err != nil:
				t.Errorf("error %v", err)
			case c.check != nil:
				c.check(t, &cfg)
			case on:
				t.Errorf("mails on without --smtp-host")
			}
		})
	}
}
