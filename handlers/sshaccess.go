package handlers

import (
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
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
func slaveSSHEndpoints(ss []store.Slave) map[string]sshEndpoint {
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
