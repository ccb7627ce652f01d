package web

import (
	"testing"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/protocol"
)

// Every call of the slave protocol that the agent retries by itself is marked so (its
// statements take turns with people's requests in the connection queue); the join, run by an
// operator, and the SSH authorization, made while a person logs in, are not.
func TestSlaveCallsRetriedByTheAgent(t *testing.T) {
	people := map[string]bool{protocol.JoinPath: true, protocol.SSHAuthPath: true}
	for _, rt := range SlaveRoutes(&handlers.Handlers{}) {
		if got, want := slaveRetries(rt.Path), !people[rt.Path]; got != want {
			t.Errorf("slaveRetries(%s) = %v, want %v", rt.Path, got, want)
		}
	}
}
