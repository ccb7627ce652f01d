package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opengpulab/gpulab/job"
)

// The ~/.ssh/gpulab_hosts_config upkeep, as imec's client does it: every `jobs` listing
// rewrites the file with two host entries per running job of the user that serves SSH,
// gpulab-<short id> (straight to the slave) and gpulab-<short id>-proxy (through the jump
// host), and ~/.ssh/config includes the file, so `ssh gpulab-0b4c3a9e` and tools that read
// ssh's configuration (scp, rsync, editors) reach the job.

// hostsConfigName is the file below ~/.ssh.
const hostsConfigName = "gpulab_hosts_config"

// shortJobID is the job UUID's first part, as imec's client names hosts.
func shortJobID(uuid string) string {
	short, _, _ := strings.Cut(uuid, "-")
	return short
}

// hostsConfig renders the entries of the jobs that can be logged in to (RUNNING, with an SSH
// endpoint, the caller's own: another user's shows its user name hidden).
func hostsConfig(jobs []job.Job, key func(*job.Job) string, knownHosts string) string {
	var b strings.Builder
	b.WriteString("# Written by gpulab-cli jobs: one entry per running job of yours. Edits are lost.\n")
	for i := range jobs {
		t, err := sshTargetOf(&jobs[i])
		if err != nil {
			continue
		}
		name := "gpulab-" + shortJobID(jobs[i].UUID)
		k := key(&jobs[i])
		writeHostEntry(&b, name, t, sshSetup{Key: k, KnownHosts: knownHosts})
		if t.ProxyHost != "" {
			writeHostEntry(&b, name+"-proxy", t, sshSetup{Key: k, KnownHosts: knownHosts, Proxy: true})
		}
	}
	return b.String()
}

func writeHostEntry(b *strings.Builder, name string, t sshTarget, s sshSetup) {
	port := t.Port
	if port == 0 {
		port = 22
	}
	fmt.Fprintf(b, "\nHost %s\n    HostName %s\n    Port %d\n    User %s\n", name, t.Host, port, t.User)
	if s.Proxy {
		fmt.Fprintf(b, "    ProxyCommand %s\n", proxyCommand(t, s))
	}
	if s.Key != "" {
		fmt.Fprintf(b, "    IdentityFile %s\n    IdentitiesOnly yes\n", strconv.Quote(s.Key))
	}
	if s.KnownHosts != "" {
		fmt.Fprintf(b, "    UserKnownHostsFile %s\n", strconv.Quote(s.KnownHosts))
	}
	b.WriteString("    StrictHostKeyChecking yes\n    PasswordAuthentication no\n    KbdInteractiveAuthentication no\n")
}

// updateHostsConfig rewrites ~/.ssh/gpulab_hosts_config from a listing and makes sure
// ~/.ssh/config includes it. Nothing is written without a home folder, or when no listed job
// can be logged in to and the file does not exist yet (a user who never used SSH keeps his
// ~/.ssh untouched).
func (a *app) updateHostsConfig(jobs []job.Job) error {
	home := a.env("HOME")
	if home == "" {
		return nil
	}
	dir := filepath.Join(home, ".ssh")
	path := filepath.Join(dir, hostsConfigName)
	some := false
	for i := range jobs {
		if _, err := sshTargetOf(&jobs[i]); err == nil {
			some = true
			break
		}
	}
	if _, err := os.Stat(path); !some && err != nil {
		return nil
	}
	knownHosts := filepath.Join(home, knownHostsPath)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	if err := writeFileAtomic(path, []byte(hostsConfig(jobs, a.sshKeyFile, knownHosts)), 0o600); err != nil {
		return err
	}
	return ensureInclude(filepath.Join(dir, "config"))
}

// ensureInclude adds `Include gpulab_hosts_config` to ssh's config unless it is there. It goes
// under its own `Host *` so that it applies wherever the user's file ends.
func ensureInclude(config string) error {
	data, err := os.ReadFile(config)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", config, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && strings.EqualFold(f[0], "Include") && f[1] == hostsConfigName {
			return nil
		}
	}
	f, err := os.OpenFile(config, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("add the gpulab hosts to %s: %w", config, err)
	}
	_, werr := fmt.Fprintf(f, "\nHost *\n    Include %s\n", hostsConfigName)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("add the gpulab hosts to %s: %w", config, err)
	}
	return nil
}
