package handlers

import (
	"encoding/json"
	"testing"

	"github.com/opengpulab/gpulab/internal/imecschema"
	"github.com/opengpulab/gpulab/job"
)

// TestWithSSH: the SSH fields appear on a RUNNING job on a slave with an endpoint only, with
// the jump host when the master is one, user names hidden from all but owner and admins, and
// the v4.0 job with them still imec's model.
func TestWithSSH(t *testing.T) {
	schemas, err := imecschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	slaves := map[string]sshEndpoint{"s1": {host: "s1.example.org", port: 2222}}
	jump := &SSHJumpHost{Host: "gpulab.example.org", Port: 22}
	cases := []struct {
		name      string
		status    job.Status
		slaves    map[string]sshEndpoint
		jump      *SSHJumpHost
		showNames bool
		want      job.StateResources
	}{
		{"owner, direct", job.StatusRunning, slaves, nil, true,
			job.StateResources{SSHHost: "s1.example.org", SSHPort: 2222, SSHUsername: "0b4c3a9e"}},
		{"owner, jump host", job.StatusRunning, slaves, jump, true,
			job.StateResources{SSHHost: "s1.example.org", SSHPort: 2222, SSHUsername: "0b4c3a9e",
				SSHProxyHost: "gpulab.example.org", SSHProxyPort: 22, SSHProxyUsername: "alice"}},
		{"other user", job.StatusRunning, slaves, jump, false,
			job.StateResources{SSHHost: "s1.example.org", SSHPort: 2222, SSHUsername: "hidden",
				SSHProxyHost: "gpulab.example.org", SSHProxyPort: 22, SSHProxyUsername: "hidden"}},
		{"slave without SSH", job.StatusRunning, map[string]sshEndpoint{}, jump, true, job.StateResources{}},
		{"not running", job.StatusFinished, slaves, jump, true, job.StateResources{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := v4Fixture(t, tc.status).Redacted()
			j.State.Resources.SSHHost = "stale" // whatever is stored is replaced
			withSSH(j, tc.slaves, tc.jump, "alice", tc.showNames)
			r := j.State.Resources
			got := job.StateResources{SSHHost: r.SSHHost, SSHPort: r.SSHPort, SSHUsername: r.SSHUsername,
				SSHProxyHost: r.SSHProxyHost, SSHProxyPort: r.SSHProxyPort, SSHProxyUsername: r.SSHProxyUsername}
			if !sameSSH(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			data, err := json.Marshal(v4JobOf(j, !tc.showNames, nil))
			if err != nil {
				t.Fatal(err)
			}
			if err := schemas.Validate("job.json#/$defs/Job", data); err != nil {
				t.Errorf("v4.0: %v\n%s", err, data)
			}
			var v4 struct {
				State struct {
					Resources map[string]any `json:"resources"`
				} `json:"state"`
			}
			_ = json.Unmarshal(data, &v4)
			if tc.want.SSHHost != "" && (v4.State.Resources["sshHost"] != tc.want.SSHHost || v4.State.Resources["sshUsername"] != tc.want.SSHUsername) {
				t.Errorf("v4.0 resources: %v", v4.State.Resources)
			}
		})
	}
}

func sameSSH(a, b job.StateResources) bool {
	return a.SSHHost == b.SSHHost && a.SSHPort == b.SSHPort && a.SSHUsername == b.SSHUsername &&
		a.SSHProxyHost == b.SSHProxyHost && a.SSHProxyPort == b.SSHProxyPort && a.SSHProxyUsername == b.SSHProxyUsername
}
