package web_test

import (
	"context"
	"crypto/tls"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// A slave joins once with its token; the certificate it gets works on slave endpoints only,
// and user certificates do not work there.
func TestSlaveJoinAndCredentialSeparation(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if _, err := w.m.Store.CreateCluster(ctx, store.Cluster{ID: 7, Name: "seven"}); err != nil {
		t.Fatal(err)
	}
	const token = "join-me-once"
	if err := w.m.Store.CreateSlaveToken(ctx, handlers.HashToken(token), "gpu7", 7, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := w.m.Store.CreateSlaveToken(ctx, handlers.HashToken("stale"), "gpu8", 7, -time.Minute); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(w.m.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	anon, err := protocol.NewClient(w.m.URL, caPEM, nil)
	if err != nil {
		t.Fatal(err)
	}
	csr, key, err := pki.NewCSR("whatever the slave claims")
	if err != nil {
		t.Fatal(err)
	}
	reply, err := anon.Join(ctx, protocol.JoinRequest{Token: token, CSR: string(csr)})
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	if reply.Name != "gpu7" || reply.ClusterID != 7 || !strings.Contains(reply.CA, "BEGIN CERTIFICATE") {
		t.Fatalf("join reply: %+v", reply)
	}
	for _, tok := range []string{token, "stale", "never-made"} {
		if _, err := anon.Join(ctx, protocol.JoinRequest{Token: tok, CSR: string(csr)}); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("join with a used, expired or unknown token (%s): %v", tok, err)
		}
	}
	cert, err := tls.X509KeyPair([]byte(reply.Certificate), pemKey(t, key))
	if err != nil {
		t.Fatal(err)
	}
	slave, err := protocol.NewClient(w.m.URL, caPEM, &cert)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := slave.Register(ctx, protocol.Inventory{InstanceID: "i1", ClusterID: 99, CPUs: 4, MemoryMiB: 4096})
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	if reg.HeartbeatInterval <= 0 {
		t.Errorf("no heartbeat interval: %+v", reg)
	}
	sl, err := w.m.Store.GetSlave(ctx, "gpu7")
	if err != nil || sl.ClusterID != 7 || !sl.Online {
		t.Fatalf("slave row %+v %v (the cluster comes from the token, not from the slave)", sl, err)
	}
	if _, err := slave.Heartbeat(ctx, protocol.Heartbeat{InstanceID: "other"}); err == nil {
		t.Errorf("heartbeat of an unregistered instance accepted")
	}
	// A slave certificate on a user endpoint, a user certificate on a slave endpoint: 403.
	status, _, _ := w.m.Do(&testmaster.User{TLS: cert}, "GET", v31+"/jobs", nil)
	if status != 403 {
		t.Errorf("slave certificate on GET jobs: %d", status)
	}
	status, data, _ := w.m.Do(w.alice, "POST", protocol.RegisterPath, strings.NewReader(`{"instanceId": "x"}`))
	if status != 403 || !strings.Contains(string(data), "slave endpoints") {
		t.Errorf("user certificate on a slave endpoint: %d %s", status, data)
	}
	if status, _, _ := w.m.Do(nil, "POST", protocol.NextPath, strings.NewReader(`{}`)); status != 401 {
		t.Errorf("no certificate on a slave endpoint: %d", status)
	}
}
