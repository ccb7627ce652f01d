package handlers

import (
	"net/http/httptest"
	"testing"

	"github.com/opengpulab/gpulab/pki"
)

// A slave caller whose certificate was left for the heartbeat's statement to check is taken
// by the heartbeat alone: every other slave endpoint refuses it rather than serve it on a
// certificate nobody checked.
func TestUncheckedSlaveCertificateOnlyForTheHeartbeat(t *testing.T) {
	r := httptest.NewRequest("POST", "/slave/next", nil)
	unchecked := &Caller{Kind: pki.KindSlave, SlaveName: "s1", CertToCheck: "42"}
	r = r.WithContext(WithCaller(r.Context(), unchecked))
	if c, err := requireSlave(r); err == nil {
		t.Fatalf("requireSlave took a caller with an unchecked certificate: %+v", c)
	}
	if c, err := requireSlaveUnchecked(r); err != nil || c != unchecked {
		t.Fatalf("the heartbeat's requireSlaveUnchecked: %+v %v", c, err)
	}
	checked := &Caller{Kind: pki.KindSlave, SlaveName: "s1"}
	r = r.WithContext(WithCaller(r.Context(), checked))
	if c, err := requireSlave(r); err != nil || c != checked {
		t.Fatalf("requireSlave with a checked certificate: %+v %v", c, err)
	}
}
