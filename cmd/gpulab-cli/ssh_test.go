package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/job"
)

// fakeKnownHosts is what the fake master publishes as GET ssh/known_hosts.
const fakeKnownHosts = "[gpulab.example.org]:2200 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJump\n"

// sshJob is alice's job running on a slave with SSH behind the master's jump host.
func sshJob(id string, st job.Status, user string) *job.Job {
	j := queuedJob(id, aliceURN)
	j.State.Status = st
	j.State.Resources = &job.StateResources{ClusterID: 1, SlaveName: "slave1", SlaveHost: "slave1.example.org",
		SSHHost: "slave1.example.org", SSHPort: 2222, SSHUsername: user,
		SSHProxyHost: "gpulab.example.org", SSHProxyPort: 2200, SSHProxyUsername: "alice"}
	return j
}

// The command lines handed to OpenSSH, word for word.
func TestSSHCommandLine(t *testing.T) {
	tg := sshTarget{Host: "slave1.example.org", Port: 2222, User: "0b4c3a9e", ProxyHost: "gpulab.example.org", ProxyPort: 2200, ProxyUser: "alice"}
	s := sshSetup{Key: "/home/alice/my keys/alice.pem", KnownHosts: "/home/alice/.gpulab/known_hosts", Proxy: true}
	common := []string{"-i", "/home/alice/my keys/alice.pem", "-oIdentitiesOnly=yes", "-oPort=2222",
		"-oUserKnownHostsFile=/home/alice/.gpulab/known_hosts", "-oStrictHostKeyChecking=yes", "-oPasswordAuthentication=no", "-oKbdInteractiveAuthentication=no"}
	proxy := "-oProxyCommand=ssh -i '/home/alice/my keys/alice.pem' -oIdentitiesOnly=yes -oPort=2200 " +
		"-oUserKnownHostsFile=/home/alice/.gpulab/known_hosts -oStrictHostKeyChecking=yes -oPasswordAuthentication=no " +
		"-oKbdInteractiveAuthentication=no -W %h:%p alice@gpulab.example.org"
	cases := []struct {
		name    string
		prog    string
		s       sshSetup
		command []string
		want    []string
	}{
		{"through the jump host", "ssh", s, nil, slices.Concat([]string{"ssh"}, common, []string{proxy, "0b4c3a9e@slave1.example.org"})},
		{"a command", "ssh", s, []string{"echo", "$GPULAB_JOB_ID"}, slices.Concat([]string{"ssh"}, common, []string{proxy, "0b4c3a9e@slave1.example.org", "echo", "$GPULAB_JOB_ID"})},
		{"direct", "ssh", sshSetup{Key: s.Key, KnownHosts: s.KnownHosts}, nil, slices.Concat([]string{"ssh"}, common, []string{"0b4c3a9e@slave1.example.org"})},
		{"sftp", "sftp", s, nil, slices.Concat([]string{"sftp"}, common, []string{proxy, "0b4c3a9e@slave1.example.org"})},
	}
	for _, tc := range cases {
		if got := sshCommandLine(tc.prog, tg, tc.s, tc.command); !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
	if got, want := shortSSHCommand(tg, s, nil), "ssh -i '/home/alice/my keys/alice.pem' -J alice@gpulab.example.org:2200 -p 2222 0b4c3a9e@slave1.example.org"; got != want {
		t.Errorf("short:\n got %s\nwant %s", got, want)
	}
}

// ssh --show against a master: the short and the full command, the known_hosts file written
// from the master's published keys; -P leaves the jump host out; jobs that cannot be logged in
// to are refused with the reason.
func TestSSHShow(t *testing.T) {
	e := newTestEnv(t)
	e.vars["HOME"] = e.dir
	e.m.add(sshJob(runningID, job.StatusRunning, "11111111"))
	e.m.add(sshJob(queuedID, job.StatusFinished, "22222222"))
	e.m.add(sshJob(bobsID, job.StatusRunning, "hidden"))
	known := filepath.Join(e.dir, ".gpulab", "known_hosts")

	r := e.run("ssh", "--show", runningID)
	if r.code != exitOK {
		t.Fatalf("ssh --show:\n%s", r)
	}
	short := "ssh -i " + e.certFile + " -J alice@gpulab.example.org:2200 -p 2222 11111111@slave1.example.org"
	if !strings.Contains(r.stdout, short+"\n") || !strings.Contains(r.stdout, "-oUserKnownHostsFile="+known) ||
		!strings.Contains(r.stdout, "'-oProxyCommand=ssh -i "+e.certFile) || !strings.Contains(r.stdout, "-W %h:%p alice@gpulab.example.org'") {
		t.Errorf("ssh --show:\n%s", r)
	}
	if data, err := os.ReadFile(known); err != nil || string(data) != fakeKnownHosts {
		t.Errorf("known_hosts: %q %v", data, err)
	}
	if r := e.run("ssh", "-s", "-P", runningID, "--", "ls", "-l"); r.code != exitOK || strings.Contains(r.stdout, "ProxyCommand") ||
		!strings.HasSuffix(r.stdout, " 11111111@slave1.example.org ls -l\n") {
		t.Errorf("ssh -s -P … -- ls -l:\n%s", r)
	}
	if r := e.run("sftp", "--show", runningID); r.code != exitOK || !strings.HasPrefix(r.stdout, "sftp -i ") {
		t.Errorf("sftp --show:\n%s", r)
	}
	if r := e.run("ssh", "--show", queuedID); r.code != exitError || !strings.Contains(r.stderr, "is FINISHED") {
		t.Errorf("ssh to an ended job:\n%s", r)
	}
	if r := e.run("ssh", "--show", bobsID); r.code != exitError || !strings.Contains(r.stderr, "not yours") {
		t.Errorf("ssh to another user's job:\n%s", r)
	}
	if r := e.run("ssh", "-p", "-P", runningID); r.code != exitUsage {
		t.Errorf("ssh -p -P:\n%s", r)
	}
}

// interactive --only-show prints the job it would submit: it waits for the duration (or until
// /tmp/running goes), mounts the project share, is interactive, and carries the login
// certificate's key.
func TestInteractiveOnlyShow(t *testing.T) {
	e := newTestEnv(t)
	r := e.run("interactive", "--project", "demo", "--duration-minutes", "30", "--docker-image", "debian:stable", "--gpus", "1", "--only-show")
	if r.code != exitOK {
		t.Fatalf("interactive --only-show:\n%s", r)
	}
	var doc struct {
		Owner   struct{ ProjectURN string }
		Request struct {
			Resources struct{ CPUs, GPUs, CPUMemoryGb int }
			Docker    struct {
				Image   string
				Command []string
				Storage []map[string]string
			}
			Scheduling struct {
				Interactive bool
				MaxDuration string
			}
			Extra struct{ SSHPubKeys []string }
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r)
	}
	rq := doc.Request
	pem, _ := os.ReadFile(e.certFile)
	if doc.Owner.ProjectURN != demoURN || rq.Resources.GPUs != 1 || rq.Resources.CPUs != 1 || rq.Docker.Image != "debian:stable" ||
		len(rq.Docker.Command) != 3 || !strings.Contains(rq.Docker.Command[2], "/tmp/running") || !strings.Contains(rq.Docker.Command[2], "1800") ||
		len(rq.Docker.Storage) != 1 || rq.Docker.Storage[0]["containerPath"] != "/project" ||
		!rq.Scheduling.Interactive || rq.Scheduling.MaxDuration != "30 minutes" ||
		len(rq.Extra.SSHPubKeys) != 1 || rq.Extra.SSHPubKeys[0] != certSSHKey(pem) {
		t.Errorf("interactive job:\n%s", r.stdout)
	}
	if len(e.m.reqs("POST", "/api/gpulab/v3.1/jobs")) != 0 {
		t.Error("--only-show submitted the job")
	}
	if r := e.run("interactive", "--project", "demo", "--docker-image", "debian:stable"); r.code != exitUsage {
		t.Errorf("without --duration-minutes:\n%s", r)
	}
}

// jobs keeps ~/.ssh/gpulab_hosts_config: an entry (and a -proxy one) per running job of the
// user's that serves SSH, and one Include in ~/.ssh/config however often it runs.
func TestJobsWritesHostsConfig(t *testing.T) {
	e := newTestEnv(t)
	e.vars["HOME"] = e.dir
	if r := e.run("jobs"); r.code != exitOK {
		t.Fatalf("jobs:\n%s", r)
	}
	if _, err := os.Stat(filepath.Join(e.dir, ".ssh")); err == nil {
		t.Fatal("jobs without SSH jobs touched ~/.ssh")
	}
	e.m.add(sshJob(runningID, job.StatusRunning, "11111111"))
	e.m.add(sshJob(bobsID, job.StatusRunning, "hidden"))
	for range 2 {
		if r := e.run("jobs"); r.code != exitOK {
			t.Fatalf("jobs:\n%s", r)
		}
	}
	data, err := os.ReadFile(filepath.Join(e.dir, ".ssh", hostsConfigName))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(data)
	for _, want := range []string{"\nHost gpulab-11111111\n    HostName slave1.example.org\n    Port 2222\n    User 11111111\n    IdentityFile \"" + e.certFile + "\"\n",
		"\nHost gpulab-11111111-proxy\n", "ProxyCommand ssh -i " + e.certFile, "UserKnownHostsFile \"" + filepath.Join(e.dir, knownHostsPath) + "\"\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("hosts config lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "gpulab-33333333") {
		t.Errorf("hosts config has bob's job:\n%s", conf)
	}
	main, _ := os.ReadFile(filepath.Join(e.dir, ".ssh", "config"))
	if strings.Count(string(main), "Include "+hostsConfigName) != 1 {
		t.Errorf("~/.ssh/config:\n%s", main)
	}
	if _, err := exec.LookPath("ssh"); err == nil {
		// OpenSSH itself reads the entry as meant (the file itself: an Include's relative path
		// is below the passwd entry's home, not this test's).
		out, err := exec.Command("ssh", "-G", "-F", filepath.Join(e.dir, ".ssh", hostsConfigName), "gpulab-11111111-proxy").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "hostname slave1.example.org\n") || !strings.Contains(string(out), "port 2222\n") ||
			!strings.Contains(string(out), "user 11111111\n") || !strings.Contains(string(out), "proxycommand ssh -i") {
			t.Errorf("ssh -G: %v\n%s", err, out)
		}
	}
}

// The login PEM is a key OpenSSH can use, and the key the CLI puts in sshPubKeys is its own.
func TestLoginPEMIsAnOpenSSHKey(t *testing.T) {
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("no ssh-keygen (openssh-client)")
	}
	e := newTestEnv(t)
	out, err := exec.Command("ssh-keygen", "-y", "-f", e.certFile).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen -y: %v\n%s", err, out)
	}
	pem, _ := os.ReadFile(e.certFile)
	got := strings.Fields(string(out))
	want := strings.Fields(certSSHKey(pem))
	if len(got) < 2 || len(want) < 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("ssh-keygen -y: %q, the certificate's key: %q", out, certSSHKey(pem))
	}
}

// The key ssh is given is one the job carries: the login PEM's or a ~/.ssh key's; without a
// match, the ~/.ssh key (it may be on the profile); without one, the PEM.
func TestSSHKeyChoice(t *testing.T) {
	e := newTestEnv(t)
	e.vars["HOME"] = e.dir
	pem, _ := os.ReadFile(e.certFile)
	a := newApp(t.Context(), func(k string) string { return e.vars[k] }, strings.NewReader(""), &strings.Builder{}, &strings.Builder{})
	a.g.cert = e.certFile
	withKeys := func(keys ...string) *job.Job {
		return &job.Job{Request: job.Request{Extra: job.Extra{SSHPubKeys: keys}}}
	}
	if got := a.sshKeyFile(withKeys()); got != e.certFile {
		t.Errorf("no ~/.ssh key: %s, want the PEM", got)
	}
	if err := os.MkdirAll(filepath.Join(e.dir, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	homeKey := e.writeFile(".ssh/id_ed25519", "private")
	e.writeFile(".ssh/id_ed25519.pub", "ssh-ed25519 AAAAHome alice@laptop\n")
	cases := []struct {
		name string
		j    *job.Job
		want string
	}{
		{"job carries the certificate's key", withKeys("ssh-ed25519 AAAAOther x", certSSHKey(pem)), e.certFile},
		{"job carries the ~/.ssh key", withKeys("ssh-ed25519 AAAAHome other-comment"), homeKey},
		{"job carries neither", withKeys("ssh-ed25519 AAAAOther x"), homeKey},
	}
	for _, tc := range cases {
		if got := a.sshKeyFile(tc.j); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if err := os.Chmod(e.certFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := a.sshKeyFile(withKeys(certSSHKey(pem))); got != homeKey {
		t.Errorf("a PEM others may read: %s, want %s", got, homeKey)
	}
}
