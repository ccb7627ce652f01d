package web_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/store"
)

func strconvQuote(s string) string { return fmt.Sprintf("%q", s) }

func TestReservationsAPI(t *testing.T) {
	w := newWorld(t)
	if _, err := w.m.Store.CreateCluster(context.Background(), store.Cluster{ID: 1, Name: "one"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	body := func(extra string) string {
		return fmt.Sprintf(`{"name": "thesis deadline", "clusterId": 1, "gpus": 2, "start": %q, "end": %q, "users": ["alice"]%s}`,
			start.Format(time.RFC3339), start.Add(2*time.Hour).Format(time.RFC3339), extra)
	}
	if status, _, _ := w.m.Do(w.alice, "POST", v31+"/reservations", strings.NewReader(body(""))); status != 403 {
		t.Fatalf("a non-admin created a reservation: %d", status)
	}
	bad := map[string]string{
		`{"clusterId": 1, "gpus": 1, "start": "2030-01-02T00:00:00Z", "end": "2030-01-01T00:00:00Z", "users": ["alice"]}`: "end",
		`{"gpus": 1, "start": "2030-01-01T00:00:00Z", "end": "2030-01-02T00:00:00Z", "users": ["alice"]}`:                 "clusterId",
		`{"clusterId": 1, "start": "2030-01-01T00:00:00Z", "end": "2030-01-02T00:00:00Z"}`:                                "users",
		`{"clusterId": 1, "start": "2030-01-01T00:00:00Z", "end": "2030-01-02T00:00:00Z", "users": ["nobody"]}`:           "users",
		`{"clusterId": 9, "start": "2030-01-01T00:00:00Z", "end": "2030-01-02T00:00:00Z", "users": ["alice"]}`:            "clusterId",
	}
	for b, field := range bad {
		status, data, _ := w.m.Do(w.dave, "POST", v31+"/reservations", strings.NewReader(b))
		if status != 400 || !strings.Contains(string(data), field) {
			t.Errorf("bad reservation %s: %d %s", b, status, data)
		}
	}
	status, data, _ := w.m.Do(w.dave, "POST", v31+"/reservations", strings.NewReader(body(`, "projects": ["audio"]`)))
	if status != 201 {
		t.Fatalf("admin creates: %d %s", status, data)
	}
	r := decode[struct {
		ID       string
		Users    []string
		Projects []string
	}](t, data)
	if len(r.Users) != 1 || r.Users[0] != "alice" || len(r.Projects) != 1 || r.Projects[0] != "audio" {
		t.Fatalf("created: %s", data)
	}
	for _, c := range []struct {
		who  string
		want int
	}{{"alice", 1}, {"bob", 1}, {"carol", 0}, {"dave", 1}} {
		u := map[string]*testmaster.User{"alice": w.alice, "bob": w.bob, "carol": w.carol, "dave": w.dave}[c.who]
		status, data, _ := w.m.Do(u, "GET", v31+"/reservations", nil)
		if got := decode[[]map[string]any](t, data); status != 200 || len(got) != c.want {
			t.Errorf("%s sees %d reservations, want %d: %s", c.who, len(got), c.want, data)
		}
	}
	// Jobs may name it only when their owner or project holds it; a refused one is not stored.
	withRes := func(id string) string {
		return strings.Replace(helloWorld, `"interactive": true`, `"reservationIds": [`+strconvQuote(id)+`]`, 1)
	}
	w.submit(t, w.alice, withRes(r.ID), "")
	w.submit(t, w.bob, withRes(r.ID), "")
	before := w.jobCount(t)
	for who, c := range map[string]struct {
		u   *testmaster.User
		id  string
		msg string
	}{
		"not a holder": {w.carol, r.ID, "held neither by you nor by project vision"},
		"unknown":      {w.alice, "0b1f0000-0000-4000-8000-000000000000", "no reservation"},
		"not an id":    {w.alice, "thesis", "must be a reservation UUID"},
	} {
		status, data, _ := w.m.Do(c.u, "POST", v31+"/jobs", strings.NewReader(withRes(c.id)))
		if status != 400 || !strings.Contains(string(data), "request.scheduling.reservationIds[0]") || !strings.Contains(string(data), c.msg) {
			t.Errorf("%s: %d %s", who, status, data)
		}
	}
	if after := w.jobCount(t); after != before {
		t.Errorf("refused submissions stored %d jobs", after-before)
	}
	// bob holds it through his project but is not named: he may not delete it; alice may.
	if status, _, _ := w.m.Do(w.bob, "DELETE", v31+"/reservations/"+r.ID, nil); status != 403 {
		t.Errorf("project holder deletes: %d", status)
	}
	if status, _, _ := w.m.Do(w.carol, "DELETE", v31+"/reservations/"+r.ID, nil); status != 404 {
		t.Errorf("a stranger deletes: %d", status)
	}
	if status, _, _ := w.m.Do(w.alice, "DELETE", v31+"/reservations/"+r.ID, nil); status != 204 {
		t.Errorf("named holder deletes: %d", status)
	}
	if status, _, _ := w.m.Do(w.dave, "DELETE", v31+"/reservations/"+r.ID, nil); status != 404 {
		t.Errorf("deleted twice: %d", status)
	}
}
