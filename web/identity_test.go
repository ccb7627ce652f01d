package web_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptrace"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// Identities, disabling and revocation (issue 10), against real Postgres, two masters sharing
// it and the Dex development provider.

const v40 = "/api/gpulab/v4.0"

// A disabled user, a revoked certificate and a certificate of an unknown user get 401 on their
// next request, at a second master on the same database too, without a restart.
func TestDisableAndRevokeHoldOnEveryMaster(t *testing.T) {
	m1 := testmaster.Start(t, testmaster.Options{})
	m2 := testmaster.Start(t, testmaster.Options{DatabaseURL: m1.DatabaseURL, CA: m1.CA})
	admin := m1.AddUser("root", true, "")
	bob := m1.AddUser("bob", false, "", "vision")
	carol := m1.AddUser("carol", false, "", "vision")
	ctx := context.Background()
	for _, m := range []*testmaster.Master{m1, m2} {
		if status, body, _ := m.Do(bob, "GET", v31+"/jobs", nil); status != 200 {
			t.Fatalf("bob before: %d %s", status, body)
		}
	}

	// Disabling: 401 at both masters at once; enabling again: back.
	if status, body, _ := m1.Do(bob, "PUT", v40+"/users/bob/disabled", strings.NewReader(`{"disabled": true}`)); status != 403 {
		t.Fatalf("bob disabling himself (not an admin): %d %s", status, body)
	}
	if status, body, _ := m1.Do(admin, "PUT", v40+"/users/bob/disabled", strings.NewReader(`{"disabled": "yes"}`)); status != 400 {
		t.Fatalf("disabled as a string: %d %s", status, body)
	}
	if status, body, _ := m1.Do(admin, "PUT", v40+"/users/bob/disabled", strings.NewReader(`{"disabled": true}`)); status != 200 {
		t.Fatalf("disable bob: %d %s", status, body)
	}
	for _, m := range []*testmaster.Master{m1, m2} {
		if status, body, _ := m.Do(bob, "GET", v31+"/jobs", nil); status != 401 || !strings.Contains(string(body), "disabled") {
			t.Fatalf("disabled bob at %s: %d %s", m.URL, status, body)
		}
	}
	if status, body, _ := m2.Do(admin, "PUT", v40+"/users/bob/disabled", strings.NewReader(`{"disabled": false}`)); status != 200 {
		t.Fatalf("enable bob: %d %s", status, body)
	}
	if status, body, _ := m1.Do(bob, "GET", v31+"/jobs", nil); status != 200 {
		t.Fatalf("bob enabled again: %d %s", status, body)
	}

	// Revocation: bob may not revoke carol's certificate (it is "not his": 404), carol may
	// revoke her own, and it is refused at both masters at once.
	if status, body, _ := m1.Do(bob, "POST", v40+"/certificates/"+carol.Serial+"/revoke", nil); status != 404 {
		t.Fatalf("bob revoking carol's certificate: %d %s", status, body)
	}
	status, body, _ := m1.Do(carol, "GET", v40+"/certificates", nil)
	var list struct {
		Items []struct {
			Serial, Owner, State string
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &list); status != 200 || err != nil || len(list.Items) != 1 || list.Items[0].Serial != carol.Serial ||
		list.Items[0].State != "valid" {
		t.Fatalf("carol's certificates: %d %s %v", status, body, err)
	}
	if status, body, _ := m1.Do(carol, "POST", v40+"/certificates/"+carol.Serial+"/revoke", nil); status != 200 || !strings.Contains(string(body), `"revoked"`) {
		t.Fatalf("carol revoking her certificate: %d %s", status, body)
	}
	for _, m := range []*testmaster.Master{m1, m2} {
		if status, body, _ := m.Do(carol, "GET", v31+"/jobs", nil); status != 401 || !strings.Contains(string(body), "revoked") {
			t.Fatalf("revoked certificate at %s: %d %s", m.URL, status, body)
		}
	}
	// An admin sees every certificate, and bob's still works.
	status, body, _ = m2.Do(admin, "GET", v40+"/certificates", nil)
	if err := json.Unmarshal(body, &list); status != 200 || err != nil || len(list.Items) != 3 {
		t.Fatalf("admin's certificate list: %d %s %v", status, body, err)
	}
	if status, _, _ := m2.Do(bob, "GET", v31+"/jobs", nil); status != 200 {
		t.Fatalf("bob after carol's revocation: %d", status)
	}

	// A valid certificate of a user the master does not know: 401, nobody created.
	ghost := issueUnrecordedUser(t, m1, "ghost")
	if status, body, _ := m1.Do(ghost, "GET", v31+"/jobs", nil); status != 401 || !strings.Contains(string(body), "not known") {
		t.Fatalf("unknown user's certificate: %d %s", status, body)
	}
	if _, err := m1.Store.GetUserByName(ctx, "ghost"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the unknown user was created: %v", err)
	}
}

// With --auto-create-cert-users, a certificate of an unknown user creates him.
func TestAutoCreateCertUsers(t *testing.T) {
	m := testmaster.Start(t, testmaster.Options{AutoCreateCertUsers: true})
	ghost := issueUnrecordedUser(t, m, "ghost")
	if status, body, _ := m.Do(ghost, "GET", v31+"/jobs", nil); status != 200 {
		t.Fatalf("unknown user's certificate with auto-creation: %d %s", status, body)
	}
	if u, err := m.Store.GetUserByName(context.Background(), "ghost"); err != nil || u.Email != "ghost@example.org" {
		t.Fatalf("auto-created user: %+v %v", u, err)
	}
}

// issueUnrecordedUser makes a certificate signed by the master's CA for a user the database
// does not have (as an old master, or one whose user was deleted, could have issued).
func issueUnrecordedUser(t *testing.T, m *testmaster.Master, name string) *testmaster.User {
	t.Helper()
	cert, key, err := m.CA.IssueClient(pki.ClientSpec{Kind: pki.KindUser, URN: pki.UserURN(testmaster.Authority, name),
		Email: name + "@example.org", Name: name})
	if err != nil {
		t.Fatal(err)
	}
	data, err := pki.ClientPEM(cert, key, "")
	if err != nil {
		t.Fatal(err)
	}
	tlsCert, err := pki.LoadClientPEM(data, "")
	if err != nil {
		t.Fatal(err)
	}
	return &testmaster.User{TLS: tlsCert}
}

// A disabled slave gets no job and so none of its secrets; the job assigned to it and not
// taken is queued again at once; its revoked certificate gets 401 on the slave protocol. A
// slave cannot act on another slave's job.
func TestDisabledSlaveGetsNothing(t *testing.T) {
	w := newProtoWorld(t)
	ctx := context.Background()
	admin := w.m.AddUser("root", true, "")
	other := w.slaveClient(t, "proto2")
	if _, err := other.Register(ctx, protocol.Inventory{InstanceID: "i1", CPUs: 8, MemoryMiB: 16384,
		GPUs: []protocol.GPU{{Index: 0, UUID: "GPU-c", Model: "Fake V100"}}}); err != nil {
		t.Fatal(err)
	}
	id, attempt := w.job(t, w.name, 0, false)

	// Slave B cannot move, log into or end slave A's job: 409 without the job's state.
	err := other.Update(ctx, protocol.StateUpdate{JobUUID: id, Attempt: attempt, From: job.StatusAssigned, To: job.StatusStarting})
	var conflict *protocol.Conflict
	if !errors.As(err, &conflict) || conflict.Status != "" || w.status(t, id) != job.StatusAssigned {
		t.Fatalf("slave B updating slave A's job: %v (%+v)", err, conflict)
	}
	work, err := other.Next(ctx, protocol.NextRequest{InstanceID: "i1"})
	if err != nil || len(work.Assignments) != 0 {
		t.Fatalf("slave B was offered slave A's job: %+v %v", work, err)
	}

	// A slave disabled while its job was being assigned (a scheduler pass that read it before)
	// is offered nothing: no job, no secret.
	db, err := sql.Open("postgres", w.m.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	setDisabled := func(d bool) {
		t.Helper()
		if _, err := db.ExecContext(ctx, `UPDATE slaves SET disabled = $2 WHERE name = $1`, w.name, d); err != nil {
			t.Fatal(err)
		}
	}
	setDisabled(true)
	work, err = w.slave.Next(ctx, protocol.NextRequest{InstanceID: "i1"})
	if err != nil || len(work.Assignments) != 0 {
		t.Fatalf("a disabled slave was offered its assigned job: %+v %v", work, err)
	}
	// Nor may it start it (its uuid is in its heartbeat's view): 409 naming the disabled slave.
	err = w.slave.Update(ctx, protocol.StateUpdate{JobUUID: id, Attempt: attempt, From: job.StatusAssigned, To: job.StatusStarting})
	if !errors.As(err, &conflict) || !strings.Contains(conflict.Message, "disabled") || w.status(t, id) != job.StatusAssigned {
		t.Fatalf("a disabled slave starting its assigned job: %v (%+v)", err, conflict)
	}
	setDisabled(false)
	if work, err = w.slave.Next(ctx, protocol.NextRequest{InstanceID: "i1"}); err != nil || len(work.Assignments) != 1 {
		t.Fatalf("the slave enabled again is not offered its job: %+v %v", work, err)
	}

	if status, body, _ := w.m.Do(w.alice, "PUT", v40+"/slaves/"+w.name+"/disabled", strings.NewReader(`{"disabled": true}`)); status != 403 {
		t.Fatalf("a user disabling a slave: %d %s", status, body)
	}
	status, body, _ := w.m.Do(admin, "PUT", v40+"/slaves/"+w.name+"/disabled", strings.NewReader(`{"disabled": true}`))
	if status != 200 || !strings.Contains(string(body), id) {
		t.Fatalf("disable slave: %d %s", status, body)
	}
	if got := w.status(t, id); got != job.StatusQueued {
		t.Fatalf("the untaken job of the disabled slave is %s, want QUEUED", got)
	}
	// Assigned again (as a scheduler that read the slave before it was disabled would): the
	// store refuses, and the slave is offered nothing.
	if done, err := w.m.Store.AssignJobs(ctx, []store.Assignment{{JobUUID: id, Placement: store.Placement{SlaveName: w.name, SlaveInstanceID: "i1",
		ClusterID: 1, Resources: job.StateResources{SlaveName: w.name, GPUIDs: []int{0}, CPUIDs: []int{0}, CPUMemoryGb: 1}}}}); err != nil || len(done) != 0 {
		t.Fatalf("a job was assigned to a disabled slave: %v %v", done, err)
	}
	work, err = w.slave.Next(ctx, protocol.NextRequest{InstanceID: "i1"})
	if err != nil || len(work.Assignments) != 0 {
		t.Fatalf("the disabled slave was given work: %+v %v", work, err)
	}

	// Its certificate revoked: 401 on every slave call.
	serials, err := w.m.Store.RevokeCertificatesOf(ctx, store.CertSlave, w.name)
	if err != nil || len(serials) != 1 {
		t.Fatalf("revoke the slave's certificate: %v %v", serials, err)
	}
	_, err = w.slave.Heartbeat(ctx, protocol.Heartbeat{InstanceID: "i1"})
	var se *protocol.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusUnauthorized {
		t.Fatalf("heartbeat with a revoked slave certificate: %v", err)
	}
}

// Two people called alice at two providers stay two accounts: the second is refused with a
// page naming the command that links him, and gets in once an admin linked him. A first login
// whose verified e-mail is that of an account without a login yet takes that account. Admins
// from the configuration are matched by verified e-mail, not by name.
func TestLoginKeyedByIssuerAndSubject(t *testing.T) {
	users := []testmaster.IdPUser{{Name: "alice", Email: "alice@example.org", Password: "alice-secret-1"},
		{Name: "dave", Email: "dave@example.org", Password: "dave-secret-1"}}
	m1 := testmaster.Start(t, testmaster.Options{Admins: []string{"alice@example.org"}, DevIdP: users})
	// The second master has its own provider (another issuer) with its own alice.
	m2 := testmaster.Start(t, testmaster.Options{DatabaseURL: m1.DatabaseURL, CA: m1.CA, Admins: []string{"alice@example.org"},
		DevIdP: []testmaster.IdPUser{{Name: "alice", Email: "alice@elsewhere.org", Password: "other-alice-1"}}})
	ctx := context.Background()
	// dave got a certificate by hand before ever logging in: his login takes his account.
	m1.AddUser("dave", false, "")

	var browser *http.Client
	login := func(m *testmaster.Master, email, password string) (int, string) {
		t.Helper()
		jar, _ := cookiejar.New(nil)
		browser = m.Client(nil)
		browser.Jar = jar
		status, _, body, err := m.Login(browser, email, password)
		if err != nil {
			t.Fatalf("login %s at %s: %v", email, m.URL, err)
		}
		return status, string(body)
	}
	if status, body := login(m1, "alice@example.org", "alice-secret-1"); status != 200 {
		t.Fatalf("first alice: %d %.300s", status, body)
	}
	// Her session is refused at once when she is disabled, and works again when enabled.
	sessionStatus := func() int {
		t.Helper()
		resp, err := browser.Get(m1.URL + v31 + "/session")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if err := m1.Store.SetUserDisabled(ctx, "alice", true); err != nil {
		t.Fatal(err)
	}
	if got := sessionStatus(); got != 401 {
		t.Fatalf("a disabled user's session: %d, want 401", got)
	}
	if err := m1.Store.SetUserDisabled(ctx, "alice", false); err != nil {
		t.Fatal(err)
	}
	if got := sessionStatus(); got != 200 {
		t.Fatalf("an enabled user's session: %d", got)
	}
	first, err := m1.Store.GetUserByName(ctx, "alice")
	if err != nil || first.Issuer != m1.IdP.Issuer || first.Subject == "" || !first.EmailVerified || !first.IsAdmin {
		t.Fatalf("first alice: %+v %v", first, err)
	}
	status, body := login(m2, "alice@elsewhere.org", "other-alice-1")
	if status != 403 || !strings.Contains(body, "belongs to another account") || !strings.Contains(body, "gpulab-master user link alice --issuer "+m2.IdP.Issuer) {
		t.Fatalf("second alice: %d %.600s", status, body)
	}
	us, err := m1.Store.ListUsers(ctx)
	if err != nil || len(us) != 2 {
		t.Fatalf("the second alice made or merged an account: %+v %v", us, err)
	}
	if u, _ := m1.Store.GetUserByName(ctx, "alice"); u.Subject != first.Subject || u.Issuer != first.Issuer {
		t.Fatalf("the first alice's login changed: %+v", u)
	}

	// dave: linked by his verified e-mail, not an admin.
	if status, body := login(m1, "dave@example.org", "dave-secret-1"); status != 200 {
		t.Fatalf("dave: %d %.300s", status, body)
	}
	if d, err := m1.Store.GetUserByName(ctx, "dave"); err != nil || d.Issuer != m1.IdP.Issuer || d.IsAdmin {
		t.Fatalf("dave after his login: %+v %v", d, err)
	}

	// An admin links the second alice's login (the subject from the page) to the account.
	sub := html.UnescapeString(between(body, "subject ", ")"))
	admin := m1.AddUser("root", true, "")
	req := `{"issuer": "` + m2.IdP.Issuer + `", "subject": "` + sub + `"}`
	if status, body, _ := m1.Do(admin, "PUT", v40+"/users/alice/login", strings.NewReader(req)); status != 200 {
		t.Fatalf("link: %d %s", status, body)
	}
	if status, body := login(m2, "alice@elsewhere.org", "other-alice-1"); status != 200 {
		t.Fatalf("second alice once linked: %d %.300s", status, body)
	}
	// The account now logs in with the second provider's identity and e-mail.
	if u, _ := m1.Store.GetUserByName(ctx, "alice"); u.Email != "alice@elsewhere.org" || u.Issuer != m2.IdP.Issuer {
		t.Fatalf("alice after the link: %+v", u)
	}
}

func between(s, from, to string) string {
	_, rest, _ := strings.Cut(s, from)
	v, _, _ := strings.Cut(rest, to)
	return v
}

// TestRevokedSlaveRefusedBeforeItsRequest: the slave calls that read their certificate's state
// in their own statement (handlers.CertCheckedByHandler) answer a revoked certificate 401
// whatever the request: a malformed body, a field refused, a job that is not a uuid, one that
// does not exist, or a well-formed call. Before the revocation the same requests get their own
// answers (400, 409, 200), so the 401 is the certificate's.
func TestRevokedSlaveRefusedBeforeItsRequest(t *testing.T) {
	m := testmaster.Start(t, testmaster.Options{})
	cert := m.SlaveCert("revoked-hb", 1)
	c := m.Client(&cert)
	post := func(path, body string) (int, string) {
		t.Helper()
		resp, err := c.Post(m.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	unknown := "00000000-0000-4000-8000-000000000000"
	calls := []struct {
		path, body string
		before     int // the answer with a valid certificate
	}{
		{protocol.HeartbeatPath, `{"instanceId": 5}`, http.StatusBadRequest},
		{protocol.HeartbeatPath, `not json`, http.StatusBadRequest},
		{protocol.HeartbeatPath, `{"instanceId": "i1", "accepting": true}`, http.StatusConflict}, // not registered
		{protocol.NextPath, `not json`, http.StatusBadRequest},
		{protocol.NextPath, `{"instanceId": "i1", "wait": 0, "jobs": []}`, http.StatusOK},
		{protocol.UpdatePath, `not json`, http.StatusBadRequest},
		{protocol.UpdatePath, `{"jobUuid": "` + unknown + `", "attempt": 1, "from": "RUNNING", "to": "FINISHED"}`, http.StatusBadRequest},
		{protocol.UpdatePath, `{"jobUuid": "job-1", "attempt": 1, "from": "ASSIGNED", "to": "STARTING"}`, http.StatusBadRequest},
		{protocol.UpdatePath, `{"jobUuid": "` + unknown + `", "attempt": 1, "from": "ASSIGNED", "to": "STARTING"}`, http.StatusConflict},
		{protocol.LogPath, `{"jobUuid": 7}`, http.StatusBadRequest},
		{protocol.LogPath, `{"jobUuid": "` + unknown + `", "attempt": 1, "seq": 0, "data": "aGkK"}`, http.StatusConflict},
		{protocol.DonePath, `not json`, http.StatusBadRequest},
		{protocol.DonePath, `{"jobUuid": "` + unknown + `", "attempt": 1, "from": "RUNNING", "to": "RUNNING"}`, http.StatusBadRequest},
		{protocol.DonePath, `{"jobUuid": "` + unknown + `", "attempt": 1, "from": "RUNNING", "to": "FINISHED"}`, http.StatusConflict},
	}
	for _, call := range calls {
		if status, got := post(call.path, call.body); status != call.before {
			t.Errorf("%s %s with a valid certificate: %d %s, want %d", call.path, call.body, status, got, call.before)
		}
	}
	if serials, err := m.Store.RevokeCertificatesOf(context.Background(), store.CertSlave, "revoked-hb"); err != nil || len(serials) != 1 {
		t.Fatalf("revoke: %v %v", serials, err)
	}
	for _, call := range calls {
		if status, got := post(call.path, call.body); status != http.StatusUnauthorized || !strings.Contains(got, "revoked") {
			t.Errorf("%s %s with a revoked certificate: %d %s, want 401", call.path, call.body, status, got)
		}
	}
}

// What a connection's certificate says is read once for the connection (web.connCert), but
// its user's disabling and its revocation still hold at the next request on that same
// connection, and another user's connection is his own.
func TestRevokeHoldsOnAKeptConnection(t *testing.T) {
	m := testmaster.Start(t, testmaster.Options{})
	admin := m.AddUser("root", true, "")
	dave := m.AddUser("dave", false, "", "vision")
	erin := m.AddUser("erin", false, "", "vision")
	calls := map[*http.Client]int{}
	get := func(c *http.Client) (int, string) {
		t.Helper()
		reused := false
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", m.URL+v31+"/jobs", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		if calls[c] > 0 && !reused {
			t.Fatal("the request opened a new connection: the test needs the kept one")
		}
		calls[c]++
		return resp.StatusCode, string(body)
	}
	dc, ec := m.Client(&dave.TLS), m.Client(&erin.TLS)
	defer dc.CloseIdleConnections()
	defer ec.CloseIdleConnections()
	for range 2 {
		for _, c := range []*http.Client{dc, ec} {
			if status, body := get(c); status != 200 {
				t.Fatalf("before: %d %s", status, body)
			}
		}
	}
	if status, body, _ := m.Do(admin, "PUT", v40+"/users/dave/disabled", strings.NewReader(`{"disabled": true}`)); status != 200 {
		t.Fatalf("disable dave: %d %s", status, body)
	}
	if status, body := get(dc); status != 401 || !strings.Contains(body, "disabled") {
		t.Fatalf("disabled dave on his kept connection: %d %s", status, body)
	}
	if status, body := get(ec); status != 200 {
		t.Fatalf("erin on hers: %d %s", status, body)
	}
	if status, body, _ := m.Do(erin, "POST", v40+"/certificates/"+erin.Serial+"/revoke", nil); status != 200 {
		t.Fatalf("erin revoking her certificate: %d %s", status, body)
	}
	if status, body := get(ec); status != 401 || !strings.Contains(body, "revoked") {
		t.Fatalf("revoked certificate on its kept connection: %d %s", status, body)
	}
}
