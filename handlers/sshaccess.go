package handlers

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/views"
)

// SSH access to running jobs, as the job JSON shows it (imec's state.resources fields): the
// slave's endpoint, the job's short id as the SSH user name (the slave's SSH server finds the
// job by it) and, when the master serves as jump host, the master's endpoint with the owner's
// name. Other users see the user names as imec's sanitized copy shows them: "hidden".

// hiddenSSHUsername is imec's placeholder for the SSH user names of a job shown to another user.
const hiddenSSHUsername = "hidden"

// SSHJumpHost is the master's SSH jump host as users reach it (Config.SSHJump).
type SSHJumpHost struct {
	Host string
	Port int
	// HostKey is its public host key in authorized_keys form (published in known_hosts).
	HostKey string
}

// sshEndpoint is a slave's SSH endpoint from its latest registration.
type sshEndpoint struct {
	host string
	port int
}

// SSHUsername is the SSH user name of a job: its UUID's first 8 characters, which the slave's
// SSH server takes as well as the whole UUID.
func SSHUsername(jobUUID string) string {
	return jobUUID[:min(8, len(jobUUID))]
}

// slaveSSHEndpoints maps the slaves that serve SSH to their endpoints.
func slaveSSHEndpoints(ss []store.SlaveShown) map[string]sshEndpoint {
	out := map[string]sshEndpoint{}
	for _, s := range ss {
		if s.SSHHost != "" && s.SSHPort > 0 {
			out[s.Name] = sshEndpoint{host: s.SSHHost, port: s.SSHPort}
		}
	}
	return out
}

// withSSH sets (or clears) the SSH fields of a job about to be shown: set only while the job
// is RUNNING on a slave with an endpoint; the user names "hidden" unless the viewer is the
// owner or an admin. j is the caller's copy and is changed in place.
func withSSH(j *job.Job, slaves map[string]sshEndpoint, jump *SSHJumpHost, ownerName string, showNames bool) {
	res := j.State.Resources
	if res == nil {
		return
	}
	res.SSHHost, res.SSHPort, res.SSHUsername = "", 0, ""
	res.SSHProxyHost, res.SSHProxyPort, res.SSHProxyUsername = "", 0, ""
	ep, ok := slaves[res.SlaveName]
	if j.State.Status != job.StatusRunning || !ok {
		return
	}
	res.SSHHost, res.SSHPort, res.SSHUsername = ep.host, ep.port, SSHUsername(j.UUID)
	if jump != nil && jump.Host != "" {
		res.SSHProxyHost, res.SSHProxyPort, res.SSHProxyUsername = jump.Host, jump.Port, ownerName
	}
	if !showNames {
		res.SSHUsername = hiddenSSHUsername
		if res.SSHProxyUsername != "" {
			res.SSHProxyUsername = hiddenSSHUsername
		}
	}
}

// SSHKnownHosts is GET ssh/known_hosts (public): the host keys of the master's jump host and
// of every slave that serves SSH, in known_hosts form ([host]:port for ports other than 22),
// for clients to trust instead of asking users about unknown keys. A slave's key that does
// not parse is left out.
func (h *Handlers) SSHKnownHosts(w http.ResponseWriter, r *http.Request) error {
	ss, err := h.store.ListSlaves(r.Context())
	if err != nil {
		return err
	}
	var b strings.Builder
	if j := h.cfg.SSHJump; j != nil && j.HostKey != "" {
		knownHostsLine(&b, j.Host, j.Port, j.HostKey)
	}
	for _, s := range ss {
		if s.SSHHost != "" && s.SSHPort > 0 && s.SSHHostKey != "" && !s.Disabled {
			knownHostsLine(&b, s.SSHHost, s.SSHPort, s.SSHHostKey)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, b.String())
	return nil
}

// knownHostsLine writes one known_hosts line, nothing for a key that does not parse.
func knownHostsLine(b *strings.Builder, host string, port int, key string) {
	pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(key))
	if err != nil {
		return
	}
	b.WriteString(knownhosts.Line([]string{knownhosts.Normalize(net.JoinHostPort(host, strconv.Itoa(port)))}, pk))
	b.WriteByte('\n')
}

// sshView is the job page's ssh command for a job whose SSH fields withSSH has filled (nil
// when it has none): through the jump host when there is one, and a `-N -L` form per port the
// job declared, forwarding the same local port to it inside the job.
func sshView(j *job.Job) *views.SSHView {
	res := j.State.Resources
	if res == nil || res.SSHHost == "" || res.SSHUsername == "" || res.SSHUsername == hiddenSSHUsername {
		return nil
	}
	base := []string{"ssh"}
	if res.SSHProxyHost != "" {
		jump := res.SSHProxyUsername + "@" + res.SSHProxyHost
		if res.SSHProxyPort != 0 && res.SSHProxyPort != 22 {
			jump += ":" + strconv.Itoa(res.SSHProxyPort)
		}
		base = append(base, "-J", jump)
	}
	if res.SSHPort != 0 && res.SSHPort != 22 {
		base = append(base, "-p", strconv.Itoa(res.SSHPort))
	}
	login := res.SSHUsername + "@" + res.SSHHost
	v := &views.SSHView{Command: strings.Join(append(base, login), " "), CLICommand: "gpulab-cli ssh " + SSHUsername(j.UUID)}
	seen := map[int]bool{}
	for _, pm := range j.Request.Docker.PortMappings {
		p := pm.ContainerPort
		if p <= 0 || seen[p] {
			continue
		}
		seen[p] = true
		fwd := fmt.Sprintf("%d:localhost:%d", p, p)
		v.Forwards = append(v.Forwards, views.SSHForward{ContainerPort: p,
			Command: strings.Join(append(append([]string{}, base...), "-N", "-L", fwd, login), " ")})
	}
	return v
}

// jobSSHView is the SSH part of the job page, for the job's owner while it runs.
func (h *Handlers) jobSSHView(ctx context.Context, c *Caller, rec *store.JobRecord) (*views.SSHView, error) {
	res := rec.Job.State.Resources
	if c == nil || rec.UserID != c.User.ID || rec.Job.State.Status != job.StatusRunning || res == nil {
		return nil, nil
	}
	ss, err := h.store.SlavesShown(ctx, []string{res.SlaveName})
	if err != nil {
		return nil, err
	}
	if len(ss) == 0 {
		return nil, nil
	}
	j := rec.Job.Redacted()
	withSSH(j, slaveSSHEndpoints(ss), h.cfg.SSHJump, rec.UserName, true)
	v := sshView(j)
	if v != nil {
		v.KnownHostURL = "/api/gpulab/" + V31 + "/ssh/known_hosts"
	}
	return v, nil
}
