package web_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/web"
)

// The authorization matrix: every route of the route tables (API, slave protocol, portal) has
// a rule saying who may call it, and every route is called as every kind of caller, each
// answer checked against the rule. A refused call must change nothing, and a refusal that
// hides an object (404, or the slave protocol's 409) must read exactly as the answer for an
// object that does not exist, so ids cannot be probed.

// access says who may call a route.
type access int

const (
	// public: everybody, also without credentials.
	public access = iota
	// anyUser: every user; anonymous 401, slaves 403.
	anyUser
	// member: a user in a project (submitting a job); a user in no project is refused with a
	// 4xx and nothing is stored.
	member
	// seer: the job's owner, members of its project and admins; other users 404 as for a
	// job that does not exist.
	seer
	// owner: the job's owner and admins; members of its project 403, other users 404.
	owner
	// admin: admins only; every other user 403.
	admin
	// slaveOnly: slave certificates only; users 403.
	slaveOnly
	// slaveJob: the slave the job is on; another slave 409 as for a job that does not exist.
	slaveJob
	// holder: the users a reservation names, and admins; others 404 as for none.
	holder
	// keyOwner: the user whose SSH key it is; others 404 as for none.
	keyOwner
	// tokenOnly: the slave join, which only a valid join token opens (403 for a wrong one,
	// whatever certificate comes with it).
	tokenOnly
	// login: the portal's login routes, public; 503 while no OIDC provider is configured.
	login
	// certOwner: the user a certificate was issued to, and admins; others 404 as for none.
	certOwner
	// asset: the stylesheet and scripts, served before any credentials are read, so to
	// everybody, disabled and revoked callers included (every other route answers them 401).
	asset
)

// subject is the object a route acts on, made fresh for every call.
type subject int

const (
	noSubject        subject = iota
	aliceJob                 // a QUEUED job of alice in project vision
	slaveBJob                // alice's job RUNNING on slave node-b
	aliceReservation         // a reservation naming alice
	aliceKey                 // an SSH key on alice's profile
	victimUser               // a fresh user without rights (target of admin changes)
	freshName                // a fresh name (for things admins create)
	visionVictim             // a fresh user in project vision (to be removed from it)
	freshCluster             // a fresh cluster owned by project vision
	aliceCert                // a certificate recorded as issued to alice (not the one she calls with)
	freshSlave               // a fresh slave that joined cluster 1
	freshService             // a fresh service identity (issue 13)
)

// rule is a route's authorization rule and how to call it.
type rule struct {
	access  access
	subject subject
	// call builds the request for subject id: the path with its parameters filled in, the
	// body and its content type.
	call func(f *matrixFixture, id string) (path, body, contentType string)
}

const apiV = "/api/gpulab/v3.1/"

func fixed(path string) func(*matrixFixture, string) (string, string, string) {
	return func(*matrixFixture, string) (string, string, string) { return path, "", "" }
}

func withID(format string) func(*matrixFixture, string) (string, string, string) {
	return func(_ *matrixFixture, id string) (string, string, string) { return fmt.Sprintf(format, id), "", "" }
}

func jsonBody(path, body string) func(*matrixFixture, string) (string, string, string) {
	return func(*matrixFixture, string) (string, string, string) { return path, body, "application/json" }
}

func form(format string, values func(f *matrixFixture, id string) url.Values) func(*matrixFixture, string) (string, string, string) {
	return func(f *matrixFixture, id string) (string, string, string) {
		path := format
		if strings.Contains(format, "%s") {
			path = fmt.Sprintf(format, id)
		}
		var v url.Values
		if values != nil {
			v = values(f, id)
		}
		return path, v.Encode(), "application/x-www-form-urlencoded"
	}
}

func slaveCall(path string, body func(id string) any) func(*matrixFixture, string) (string, string, string) {
	return func(_ *matrixFixture, id string) (string, string, string) {
		b, _ := json.Marshal(body(id))
		return path, string(b), "application/json"
	}
}

// routeRules holds a rule for every route, keyed "METHOD pattern" (API routes under v3.1).
// A route without a rule fails TestEveryRouteHasAnAuthorizationRule: add one here.
var routeRules = map[string]rule{
	// The JSON API.
	"GET " + apiV + "version": {public, noSubject, fixed(apiV + "version")},

	// SSH into jobs (issue 12): the host keys are public.
	"GET " + apiV + "ssh/known_hosts": {public, noSubject, fixed(apiV + "ssh/known_hosts")},

	"POST " + apiV + "jobs": {member, noSubject, func(f *matrixFixture, _ string) (string, string, string) {
		return apiV + "jobs", matrixJob, "application/json"
	}},
	"GET " + apiV + "jobs":      {anyUser, noSubject, fixed(apiV + "jobs")},
	"GET " + apiV + "jobs/{id}": {seer, aliceJob, withID(apiV + "jobs/%s")},
	"PUT " + apiV + "jobs/{id}/state/status": {owner, aliceJob, func(_ *matrixFixture, id string) (string, string, string) {
		return apiV + "jobs/" + id + "/state/status", "CANCELLED", "text/plain"
	}},
	"DELETE " + apiV + "jobs/{id}":      {owner, aliceJob, withID(apiV + "jobs/%s?force=true")},
	"GET " + apiV + "jobs/{id}/debug":   {seer, aliceJob, withID(apiV + "jobs/%s/debug")},
	"GET " + apiV + "jobs/{id}/log":     {seer, aliceJob, withID(apiV + "jobs/%s/log")},
	"GET " + apiV + "jobs/{id}/explain": {seer, aliceJob, withID(apiV + "jobs/%s/explain")},
	"GET " + apiV + "jobs/{id}/usage":   {seer, aliceJob, withID(apiV + "jobs/%s/usage")},
	"POST " + apiV + "convert":          {public, noSubject, jsonBody(apiV+"convert", `{"jobDefinition": {"name": "x", "clusterId": 1, "dockerImage": "debian:stable", "resources": {"gpus": 0, "cpuCores": 1, "systemMemory": 1024}}}`)},
	"GET " + apiV + "clusters":          {public, noSubject, fixed(apiV + "clusters")},
	"GET " + apiV + "slaves":            {public, noSubject, fixed(apiV + "slaves")},
	"GET " + apiV + "usage":             {anyUser, noSubject, fixed(apiV + "usage")},
	"GET " + apiV + "reservations":      {anyUser, noSubject, fixed(apiV + "reservations")},
	"POST " + apiV + "reservations": {admin, noSubject, func(f *matrixFixture, _ string) (string, string, string) {
		return apiV + "reservations", f.reservationJSON(), "application/json"
	}},
	"DELETE " + apiV + "reservations/{rid}": {holder, aliceReservation, withID(apiV + "reservations/%s")},
	"GET " + apiV + "users":                 {admin, noSubject, fixed(apiV + "users")},
	"PUT " + apiV + "users/{name}/disabled": {admin, victimUser, func(f *matrixFixture, id string) (string, string, string) {
		return apiV + "users/" + f.userName(id) + "/disabled", `{"disabled": true}`, "application/json"
	}},
	"PUT " + apiV + "users/{name}/login": {admin, victimUser, func(f *matrixFixture, id string) (string, string, string) {
		return apiV + "users/" + f.userName(id) + "/login", `{"issuer": "https://idp.example", "subject": "s-` + id + `"}`, "application/json"
	}},
	"GET " + apiV + "certificates":                  {anyUser, noSubject, fixed(apiV + "certificates")},
	"POST " + apiV + "certificates/{serial}/revoke": {certOwner, aliceCert, withID(apiV + "certificates/%s/revoke")},
	"PUT " + apiV + "slaves/{name}/disabled": {admin, freshSlave, func(_ *matrixFixture, name string) (string, string, string) {
		return apiV + "slaves/" + name + "/disabled", `{"disabled": true}`, "application/json"
	}},

	// Registered by routes itself, next to the tables.
	"GET " + apiV + "session":      {anyUser, noSubject, fixed(apiV + "session")},
	"GET /api/gpulab/openapi.json": {public, noSubject, fixed("/api/gpulab/openapi.json")},
	"GET " + web.LoginPath:         {login, noSubject, fixed(web.LoginPath)},
	"GET " + web.CallbackPath:      {login, noSubject, fixed(web.CallbackPath)},
	"POST " + web.LogoutPath:       {public, noSubject, fixed(web.LogoutPath)},
	"GET " + web.LoggedOutPath:     {public, noSubject, fixed(web.LoggedOutPath)},

	// The slave protocol.
	"POST " + protocol.JoinPath:      {tokenOnly, noSubject, jsonBody(protocol.JoinPath, `{"token": "not-a-token", "csr": ""}`)},
	"POST " + protocol.RegisterPath:  {slaveOnly, noSubject, nil}, // body made per slave in call
	"POST " + protocol.HeartbeatPath: {slaveOnly, noSubject, nil},
	"POST " + protocol.NextPath:      {slaveOnly, noSubject, nil},
	// A refusal is a 200 with allowed false: any slave may ask, the answer only concerns its own jobs.
	"POST " + protocol.SSHAuthPath: {slaveOnly, noSubject, jsonBody(protocol.SSHAuthPath,
		`{"user": "0123abcd", "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBJV0zuFkeUGxoSarO4CDg0AktQqQeW04BHo7P8pg1gz", "remoteAddr": "10.0.0.5:5555"}`)},
	"POST " + protocol.UpdatePath: {slaveJob, slaveBJob, slaveCall(protocol.UpdatePath, func(id string) any {
		return protocol.StateUpdate{JobUUID: id, Attempt: 1, From: job.StatusStarting, To: job.StatusRunning}
	})},
	"POST " + protocol.LogPath: {slaveJob, slaveBJob, slaveCall(protocol.LogPath, func(id string) any {
		return protocol.LogChunk{JobUUID: id, Attempt: 1, Seq: 0, Data: []byte("forged line\n")}
	})},
	"POST " + protocol.LogStatePath: {slaveJob, slaveBJob, slaveCall(protocol.LogStatePath, func(id string) any {
		return map[string]string{"jobUuid": id}
	})},
	"POST " + protocol.DonePath: {slaveJob, slaveBJob, slaveCall(protocol.DonePath, func(id string) any {
		code := 0
		return protocol.Completion{JobUUID: id, Attempt: 1, From: job.StatusRunning, To: job.StatusFinished, ExitCode: &code}
	})},

	// The portal.
	"GET /static/{file...}": {asset, noSubject, fixed("/static/style.css")},
	"GET /{$}":              {anyUser, noSubject, fixed("/")},
	"GET /jobs":             {anyUser, noSubject, fixed("/jobs")},
	"GET /jobs/new":         {anyUser, noSubject, fixed("/jobs/new")},
	"POST /jobs/new": {member, noSubject, form("/jobs/new", func(*matrixFixture, string) url.Values {
		return url.Values{"json": {matrixJob}, "action": {"submit"}}
	})},
	"GET /jobs/{id}":                  {seer, aliceJob, withID("/jobs/%s")},
	"GET /jobs/{id}/log":              {seer, aliceJob, withID("/jobs/%s/log")},
	"POST /jobs/{id}/{action}":        {owner, aliceJob, nil}, // every action, see jobActions
	"GET /live/slaves":                {public, noSubject, fixed("/live/slaves")},
	"GET /live/clusters":              {public, noSubject, fixed("/live/clusters")},
	"GET /reservations":               {anyUser, noSubject, fixed("/reservations")},
	"POST /reservations":              {admin, noSubject, form("/reservations", func(f *matrixFixture, _ string) url.Values { return f.reservationForm() })},
	"POST /reservations/{rid}/delete": {holder, aliceReservation, form("/reservations/%s/delete", nil)},
	"GET /usage":                      {anyUser, noSubject, fixed("/usage")},
	"GET /profile":                    {anyUser, noSubject, fixed("/profile")},
	"POST /profile/certificate":       {anyUser, noSubject, form("/profile/certificate", nil)},
	"POST /profile/ssh-keys": {anyUser, noSubject, form("/profile/ssh-keys", func(*matrixFixture, string) url.Values {
		return url.Values{"name": {"k"}, "public_key": {newSSHKey()}}
	})},
	"POST /profile/ssh-keys/{id}/delete":         {keyOwner, aliceKey, form("/profile/ssh-keys/%s/delete", nil)},
	"POST /profile/mail":                         {anyUser, noSubject, form("/profile/mail", func(*matrixFixture, string) url.Values { return url.Values{"on": {"end"}} })},
	"POST /profile/certificates/{serial}/revoke": {certOwner, aliceCert, form("/profile/certificates/%s/revoke", nil)},
	"POST /admin/users/{name}/disabled": {admin, victimUser, func(f *matrixFixture, id string) (string, string, string) {
		return "/admin/users/" + f.userName(id) + "/disabled", url.Values{"disabled": {"true"}}.Encode(), "application/x-www-form-urlencoded"
	}},
	"POST /admin/slaves/{name}/disabled": {admin, freshSlave, form("/admin/slaves/%s/disabled", func(*matrixFixture, string) url.Values {
		return url.Values{"disabled": {"true"}}
	})},
	"POST /admin/certificates/{serial}/revoke": {admin, aliceCert, form("/admin/certificates/%s/revoke", nil)},
	"POST /admin/services": {admin, freshName, form("/admin/services", func(_ *matrixFixture, name string) url.Values {
		return url.Values{"name": {name}, "projects": {"vision"}}
	})},
	"POST /admin/services/{name}/revoke": {admin, freshService, form("/admin/services/%s/revoke", nil)},
	"POST /admin/slave-token": {admin, freshName, form("/admin/slave-token", func(_ *matrixFixture, name string) url.Values {
		return url.Values{"name": {name}, "clusterId": {"1"}}
	})},

	"GET /admin": {admin, noSubject, fixed("/admin")},
	"POST /admin/users/{id}/admin": {admin, victimUser, form("/admin/users/%s/admin", func(*matrixFixture, string) url.Values {
		return url.Values{"admin": {"true"}}
	})},
	"POST /admin/projects": {admin, freshName, form("/admin/projects", func(_ *matrixFixture, name string) url.Values {
		return url.Values{"name": {name}, "description": {"made by the matrix"}}
	})},
	"POST /admin/projects/{id}/members": {admin, victimUser, func(f *matrixFixture, id string) (string, string, string) {
		return fmt.Sprintf("/admin/projects/%d/members", f.vision), url.Values{"user": {f.userName(id)}}.Encode(), "application/x-www-form-urlencoded"
	}},
	"POST /admin/projects/{id}/members/{user}/delete": {admin, visionVictim, func(f *matrixFixture, id string) (string, string, string) {
		return fmt.Sprintf("/admin/projects/%d/members/%s/delete", f.vision, id), "", "application/x-www-form-urlencoded"
	}},
	"POST /admin/clusters": {admin, noSubject, func(f *matrixFixture, _ string) (string, string, string) {
		return "/admin/clusters", url.Values{"id": {strconv.Itoa(f.nextCluster())}, "name": {"c"}}.Encode(), "application/x-www-form-urlencoded"
	}},
	"POST /admin/clusters/{id}/private": {admin, freshCluster, form("/admin/clusters/%s/private", func(*matrixFixture, string) url.Values {
		return url.Values{"private": {"true"}}
	})},
	"POST /admin/clusters/{id}/owners": {admin, freshCluster, func(f *matrixFixture, id string) (string, string, string) {
		return "/admin/clusters/" + id + "/owners", url.Values{"project": {strconv.FormatInt(f.audio, 10)}}.Encode(), "application/x-www-form-urlencoded"
	}},
	"POST /admin/clusters/{id}/owners/{project}/delete": {admin, freshCluster, func(f *matrixFixture, id string) (string, string, string) {
		return fmt.Sprintf("/admin/clusters/%s/owners/%d/delete", id, f.vision), "", "application/x-www-form-urlencoded"
	}},
	"POST /admin/slaves/{name}/accepting": {admin, noSubject, form("/admin/slaves/node-a/accepting", func(*matrixFixture, string) url.Values {
		return url.Values{"accepting": {"false"}}
	})},
}

// builtinRoutes are the routes that routes registers itself, outside the tables.
var builtinRoutes = []string{
	"GET " + apiV + "session", "GET /api/gpulab/openapi.json",
	"GET " + web.LoginPath, "GET " + web.CallbackPath, "POST " + web.LogoutPath, "GET " + web.LoggedOutPath,
}

// allRoutes lists every route of the tables as "METHOD pattern".
func allRoutes() []string {
	var out []string
	for _, rt := range web.APIRoutes(nil) {
		out = append(out, rt.Method+" "+apiV+rt.Path)
	}
	for _, rt := range web.SlaveRoutes(nil) {
		out = append(out, rt.Method+" "+rt.Path)
	}
	for _, rt := range web.PortalRoutes(&handlers.Handlers{}) {
		out = append(out, rt.Method+" "+rt.Path)
	}
	return append(out, builtinRoutes...)
}

func TestEveryRouteHasAnAuthorizationRule(t *testing.T) {
	routes := allRoutes()
	known := map[string]bool{}
	for _, r := range routes {
		known[r] = true
		if _, ok := routeRules[r]; !ok {
			t.Errorf("route %s has no authorization rule: add one to routeRules in authz_matrix_test.go", r)
		}
	}
	for r := range routeRules {
		if !known[r] {
			t.Errorf("routeRules has a rule for %s, which is no route (renamed or removed?)", r)
		}
	}
	if len(routes) < 50 {
		t.Fatalf("only %d routes found: the tables were not read", len(routes))
	}
}

// actor is a kind of caller of the matrix.
type actor struct {
	name   string
	user   *testmaster.User // nil: anonymous or a slave
	slave  string           // a slave certificate's slave
	client *http.Client
	// refused: the caller's user is disabled or his certificate revoked (for a slave: its
	// certificate revoked). Every route but the assets answers 401, public ones included.
	refused bool
	// disabledSlave: a slave an admin disabled. Its certificate still opens the slave
	// protocol (it reports the jobs it runs), but it is offered no job and no job secret.
	disabledSlave bool
	// service: a service certificate's service (issue 13), acting for user (nil: without the
	// act-as header).
	service string
}

type matrixFixture struct {
	t             *testing.T
	w             *world
	vision, audio int64
	seq           atomic.Int64
	users         map[string]string // id → name of victim users
	waiting       string            // the job assigned to the disabled slave node-c
}

func (f *matrixFixture) n() int64 { return f.seq.Add(1) }

func (f *matrixFixture) nextCluster() int { return 100 + int(f.n()) }

func (f *matrixFixture) userName(id string) string { return f.users[id] }

func (f *matrixFixture) reservationJSON() string {
	start := time.Now().Add(time.Hour).UTC()
	b, _ := json.Marshal(map[string]any{"name": "r", "clusterId": 1, "gpus": 1, "start": start, "end": start.Add(time.Hour), "users": []string{"alice"}})
	return string(b)
}

func (f *matrixFixture) reservationForm() url.Values {
	start := time.Now().Add(time.Hour).UTC()
	return url.Values{"name": {"r"}, "clusterId": {"1"}, "gpus": {"1"}, "users": {"alice"},
		"start": {start.Format("2006-01-02T15:04")}, "end": {start.Add(time.Hour).Format("2006-01-02T15:04")}}
}

// fresh makes a new subject and returns its id.
func (f *matrixFixture) fresh(s subject) string {
	t, ctx, m := f.t, context.Background(), f.w.m
	t.Helper()
	switch s {
	case aliceJob:
		return f.w.submit(t, f.w.alice, jobDoc("victim", projectURN("vision")), "")
	case slaveBJob:
		id := f.w.submit(t, f.w.alice, jobDoc("on-b", projectURN("vision")), "")
		if _, err := m.Store.AssignJobs(ctx, []store.Assignment{{JobUUID: id, Message: "assigned", Placement: store.Placement{
			SlaveName: "node-b", SlaveInstanceID: "ib", ClusterID: 1, Resources: job.StateResources{ClusterID: 1, SlaveName: "node-b", CPUIDs: []int{0}, CPUMemoryGb: 1}}}}); err != nil {
			t.Fatalf("assign: %v", err)
		}
		m.ForceJobStatus(id, job.StatusStarting)
		m.ForceJobStatus(id, job.StatusRunning)
		return id
	case aliceReservation:
		start := time.Now().Add(time.Hour)
		r, err := m.Store.CreateReservation(ctx, store.Reservation{ID: uuid.NewString(), Name: "alice's", SlaveNames: []string{"node-a"},
			Start: start, End: start.Add(time.Hour), UserIDs: []int64{f.w.alice.ID}, ProjectIDs: []int64{f.vision}, CreatedBy: f.w.dave.ID})
		if err != nil {
			t.Fatalf("reservation: %v", err)
		}
		return r.ID
	case aliceKey:
		k, err := handlers.ParseSSHPublicKey(newSSHKey())
		if err != nil {
			t.Fatal(err)
		}
		sk, err := m.Store.AddSSHKey(ctx, f.w.alice.ID, "alice's", k.Line, k.Fingerprint)
		if err != nil {
			t.Fatalf("ssh key: %v", err)
		}
		return strconv.FormatInt(sk.ID, 10)
	case victimUser:
		name := fmt.Sprintf("victim%d", f.n())
		u := m.AddUser(name, false, "")
		id := strconv.FormatInt(u.ID, 10)
		f.users[id] = name
		return id
	case freshName:
		return fmt.Sprintf("proj%d", f.n())
	case visionVictim:
		u := m.AddUser(fmt.Sprintf("member%d", f.n()), false, "", "vision")
		return strconv.FormatInt(u.ID, 10)
	case freshCluster:
		id := f.nextCluster()
		if _, err := m.Store.CreateCluster(ctx, store.Cluster{ID: id, Name: fmt.Sprintf("c%d", id), GuestLimitS: 3600}); err != nil {
			t.Fatalf("cluster: %v", err)
		}
		if err := m.Store.AddClusterOwner(ctx, id, f.vision); err != nil {
			t.Fatalf("cluster owner: %v", err)
		}
		return strconv.Itoa(id)
	case aliceCert:
		serial := strconv.FormatInt(1_000_000_000+f.n(), 10)
		if err := m.Store.RecordCertificate(ctx, serial, store.CertUser, "alice", time.Now().Add(time.Hour), ""); err != nil {
			t.Fatalf("certificate: %v", err)
		}
		return serial
	case freshSlave:
		name := fmt.Sprintf("node-x%d", f.n())
		if err := m.Store.JoinSlave(ctx, name, 1); err != nil {
			t.Fatalf("slave: %v", err)
		}
		return name
	case freshService:
		return m.AddService(fmt.Sprintf("svc%d", f.n())).Name
	}
	return ""
}

// unknown is an id of subject's kind that names nothing.
func (f *matrixFixture) unknown(s subject) string {
	switch s {
	case aliceKey, victimUser, visionVictim, freshCluster, aliceCert:
		return "987654321"
	case freshSlave:
		return "no-such-slave"
	case freshService:
		return "no-such-service"
	}
	return uuid.NewString()
}

// digest sums up what a refused call must not change.
func (f *matrixFixture) digest() string {
	f.t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT id, name, is_admin, disabled FROM users ORDER BY id`,
		`SELECT user_id, project_id FROM memberships ORDER BY 1, 2`,
		`SELECT id, name FROM projects ORDER BY id`,
		`SELECT id, is_private FROM clusters ORDER BY id`,
		`SELECT cluster_id, project_id FROM cluster_projects ORDER BY 1, 2`,
		`SELECT name, accepting_jobs, disabled FROM slaves ORDER BY name`,
		`SELECT serial, revoked_at IS NOT NULL FROM certificates ORDER BY serial`,
		`SELECT uuid, status, attempt, coalesce(assigned_slave_name, '') FROM jobs ORDER BY uuid`,
		`SELECT count(*) FROM job_events`,
		`SELECT count(*) FROM job_logs`,
		`SELECT id, user_id FROM ssh_keys ORDER BY id`,
		`SELECT id FROM reservations ORDER BY id`,
		`SELECT name, disabled, projects FROM services ORDER BY name`,
	} {
		f.digestQuery(&b, q)
		b.WriteString("\n")
	}
	return b.String()
}

// digestQuery writes the rows of one query of the digest.
func (f *matrixFixture) digestQuery(b *strings.Builder, q string) {
	rows, err := f.w.m.Store.DB().QueryContext(context.Background(), q)
	if err != nil {
		f.t.Fatalf("digest %s: %v", q, err)
	}
	defer func() { _ = rows.Close() }()
	cols, _ := rows.Columns()
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			f.t.Fatal(err)
		}
		fmt.Fprintf(b, "%v;", vals)
	}
}

func (a actor) do(t *testing.T, base, method, path, body, contentType string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	if a.service != "" && a.user != nil {
		req.Header.Set(handlers.ActAsHeader, a.user.Name)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s as %s: %v", method, path, a.name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(data)
}

// want is what the rule says an actor gets: 0 when he may call the route.
func want(route string, acc access, a actor, w *world) int {
	switch {
	case acc == asset:
		return 0
	case a.refused:
		return http.StatusUnauthorized
	case a.service != "":
		return wantService(route, acc, a, w)
	case acc == public || acc == login:
		return 0
	case acc == tokenOnly:
		return http.StatusForbidden
	case a.user == nil && a.slave == "":
		return http.StatusUnauthorized
	case acc == slaveOnly:
		if a.slave != "" {
			return 0
		}
		return http.StatusForbidden
	case acc == slaveJob:
		switch a.slave {
		case "node-b":
			return 0
		case "":
			return http.StatusForbidden
		}
		return http.StatusConflict
	case a.slave != "":
		return http.StatusForbidden
	}
	u := a.user
	isAdmin := u == w.dave
	switch acc {
	case anyUser:
		return 0
	case member:
		if u == w.eve {
			return -1 // refused with some 4xx: he has no project to run it in
		}
		return 0
	case admin:
		if isAdmin {
			return 0
		}
		return http.StatusForbidden
	case seer:
		if isAdmin || u == w.alice || u == w.carol {
			return 0
		}
		return http.StatusNotFound
	case owner:
		switch {
		case isAdmin || u == w.alice:
			return 0
		case u == w.carol:
			return http.StatusForbidden
		}
		return http.StatusNotFound
	case holder:
		switch {
		case isAdmin || u == w.alice:
			return 0
		case u == w.carol:
			return http.StatusForbidden // a holder through the project sees it, may not delete it
		}
		return http.StatusNotFound
	case keyOwner:
		if u == w.alice {
			return 0
		}
		return http.StatusNotFound
	case certOwner:
		if isAdmin || u == w.alice {
			return 0
		}
		return http.StatusNotFound
	}
	panic("unknown access")
}

// wantService is want for a service: the API only (the portal and the slave protocol refuse
// it), without the act-as header its public endpoints only; acting for a user, that user's
// rights but never an admin's, and not over his credentials.
func wantService(route string, acc access, a actor, w *world) int {
	switch {
	case !strings.Contains(route, " /api/"):
		return http.StatusForbidden
	case a.user == nil && acc == public:
		return 0
	case a.user == nil, acc == admin, acc == certOwner, route == "GET "+apiV+"certificates":
		return http.StatusForbidden
	}
	return want(route, acc, actor{name: a.name, user: a.user}, w)
}

// TestAuthorizationMatrixEveryRoute calls every route of the tables as every kind of caller:
// anonymous, a user in no project, the owner, a member of the owner's project, a user of
// another project, two slaves (A acting on B's jobs), the callers whose rights an admin took
// away while the master ran (withdrawnActors) and an admin.
func TestAuthorizationMatrixEveryRoute(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	f := &matrixFixture{t: t, w: w, users: map[string]string{}}
	for _, p := range []struct {
		name string
		id   *int64
	}{{"vision", &f.vision}, {"audio", &f.audio}} {
		pr, err := w.m.Store.GetProjectByName(ctx, p.name)
		if err != nil {
			t.Fatal(err)
		}
		*p.id = pr.ID
	}
	slaveCerts := map[string]tls.Certificate{}
	for _, name := range []string{"node-a", "node-b"} {
		slaveCerts[name] = w.m.SlaveCert(name, 1)
		inv, _ := json.Marshal(protocol.Inventory{Name: name, CPUs: 8, MemoryMiB: 32768})
		if _, err := w.m.Store.RegisterSlave(ctx, store.SlaveRegistration{Name: name, InstanceID: "i" + name[len(name)-1:], Host: name, ClusterID: 1, Inventory: inv}); err != nil {
			t.Fatal(err)
		}
	}
	var actors []actor
	actors = append(actors, actor{name: "anonymous", client: w.m.Client(nil)})
	for _, u := range []struct {
		name string
		u    *testmaster.User
	}{{"eve (in no project)", w.eve}, {"alice (owner)", w.alice}, {"carol (alice's project)", w.carol}, {"bob (another project)", w.bob}} {
		actors = append(actors, actor{name: u.name, user: u.u, client: w.m.Client(&u.u.TLS)})
	}
	for _, name := range []string{"node-a", "node-b"} {
		c := slaveCerts[name]
		actors = append(actors, actor{name: "slave " + name, slave: name, client: w.m.Client(&c)})
	}
	withdrawn := f.withdrawnActors(ctx)
	actors = append(actors, withdrawn...)
	actors = append(actors, f.serviceActors()...)
	// The admin comes last: what he is allowed to change, the others tried before him.
	actors = append(actors, actor{name: "dave (admin)", user: w.dave, client: w.m.Client(&w.dave.TLS)})

	// The first case: a non-admin making himself admin.
	eve := actors[1]
	for _, path := range []string{fmt.Sprintf("/admin/users/%d/admin", w.eve.ID)} {
		status, body := eve.do(t, w.m.URL, "POST", path, "admin=true", "application/x-www-form-urlencoded")
		if u, err := w.m.Store.GetUserByName(ctx, "eve"); err != nil || u.IsAdmin || status != http.StatusForbidden {
			t.Fatalf("eve making herself admin: %d %s; admin now: %v", status, body, u.IsAdmin)
		}
	}

	routes := allRoutes()
	sort.Strings(routes)
	calls, refusals, withdrawnRefusals, disabledPolls := 0, 0, 0, 0
	for _, route := range routes {
		rl, ok := routeRules[route]
		if !ok {
			continue // TestEveryRouteHasAnAuthorizationRule reports it
		}
		method, _, _ := strings.Cut(route, " ")
		calls1 := func(a actor, id string) []func(string) (string, string, string) {
			switch {
			case route == "POST /jobs/{id}/{action}":
				var out []func(string) (string, string, string)
				for _, act := range []string{"cancel", "hold", "release", "halt", "delete"} {
					out = append(out, func(id string) (string, string, string) {
						return "/jobs/" + id + "/" + act, "", "application/x-www-form-urlencoded"
					})
				}
				return out
			case rl.call == nil: // register, heartbeat, next: the slave's own instance
				inst := "i"
				if a.slave != "" {
					inst += a.slave[len(a.slave)-1:]
				}
				return []func(string) (string, string, string){func(string) (string, string, string) {
					var body any
					switch route {
					case "POST " + protocol.RegisterPath:
						body = protocol.Inventory{Name: a.slave, InstanceID: inst, ClusterID: 1, CPUs: 8, MemoryMiB: 32768}
					case "POST " + protocol.HeartbeatPath:
						// Slave A claims slave B's jobs, with usage: it must change nothing of theirs.
						body = protocol.Heartbeat{InstanceID: inst, Accepting: true, Jobs: f.runningOnB(t, a)}
					default:
						req := protocol.NextRequest{InstanceID: inst, Jobs: f.runningOnB(t, a)}
						if a.disabledSlave {
							// A long poll, short for the test: the job waiting for it
							// must not come, however long it waits.
							req.Wait = 300 * time.Millisecond
						}
						body = req
					}
					b, _ := json.Marshal(body)
					_, path, _ := strings.Cut(route, " ")
					return path, string(b), "application/json"
				}}
			}
			builds := []func(string) (string, string, string){func(id string) (string, string, string) { return rl.call(f, id) }}
			if rl.access == admin {
				// The admin check comes before the body is read: a non-admin with a
				// broken body learns nothing but 403.
				builds = append(builds, func(id string) (string, string, string) {
					path, _, ct := rl.call(f, id)
					return path, "{%zz&\x00", ct
				})
			}
			return builds
		}
		for _, a := range actors {
			exp := want(route, rl.access, a, w)
			for _, build := range calls1(a, "") {
				id := f.fresh(rl.subject)
				path, body, ct := build(id)
				before := f.digest()
				status, got := a.do(t, w.m.URL, method, path, body, ct)
				calls++
				name := fmt.Sprintf("%s %s as %s", method, path, a.name)
				if a.refused || a.disabledSlave {
					if strings.Contains(got, matrixImageSecret) || strings.Contains(got, matrixEnvSecret) {
						t.Errorf("%s: %d, the answer holds a secret of the job waiting for node-c: %s", name, status, clip(got))
					}
				}
				if a.disabledSlave {
					disabledPolls += f.checkDisabledSlave(route, name, status, got)
				}
				if a.refused && status == http.StatusUnauthorized {
					withdrawnRefusals++
					if !strings.Contains(got, "disabled") && !strings.Contains(got, "revoked") {
						t.Errorf("%s: 401 %s, want it to say why (disabled or revoked)", name, clip(got))
					}
				}
				switch {
				case status == http.StatusServiceUnavailable && rl.access == login:
					continue
				case status >= 500:
					t.Errorf("%s: %d %s", name, status, clip(got))
				case exp == 0:
					if status == http.StatusUnauthorized || status == http.StatusForbidden {
						t.Errorf("%s: %d %s, want it allowed", name, status, clip(got))
					}
					continue
				case exp == -1:
					if status < 400 {
						t.Errorf("%s: %d %s, want a refusal (4xx)", name, status, clip(got))
					}
				case status != exp:
					t.Errorf("%s: %d %s, want %d", name, status, clip(got), exp)
				}
				refusals++
				if after := f.digest(); after != before {
					t.Errorf("%s was refused (%d) but changed the database:\nbefore %s\nafter  %s", name, status, before, after)
				}
				if (exp == http.StatusNotFound || exp == http.StatusConflict) && rl.subject != noSubject {
					// Not yours must read as not there.
					other := f.unknown(rl.subject)
					path2, body2, ct2 := build(other)
					status2, got2 := a.do(t, w.m.URL, method, path2, body2, ct2)
					if status2 != status || strings.ReplaceAll(got2, other, "ID") != strings.ReplaceAll(got, id, "ID") {
						t.Errorf("%s: another's object answers differently from a missing one:\n%d %s\n%d %s", name, status, clip(got), status2, clip(got2))
					}
				}
			}
		}
	}

	// Slave A lists slave B's running job in its heartbeat and long poll, with usage: the
	// job stays B's, RUNNING, its usage untouched, and A is told to stop it.
	var slaveA actor
	for _, a := range actors {
		if a.name == "slave node-a" {
			slaveA = a
		}
	}
	onB := f.fresh(slaveBJob)
	before := f.digest()
	for _, path := range []string{protocol.HeartbeatPath, protocol.NextPath} {
		unknown := uuid.NewString()
		held := []protocol.RunningJob{{JobUUID: onB, Attempt: 1, Status: job.StatusRunning, Usage: &protocol.Usage{CPUPercent: 999, MemoryMiB: 1}},
			{JobUUID: unknown, Attempt: 1, Status: job.StatusRunning}}
		var body any = protocol.Heartbeat{InstanceID: "ia", Accepting: true, Jobs: held}
		if path == protocol.NextPath {
			body = protocol.NextRequest{InstanceID: "ia", Jobs: held}
		}
		b, _ := json.Marshal(body)
		status, got := slaveA.do(t, w.m.URL, "POST", path, string(b), "application/json")
		var reply struct{ Stops []protocol.StopOrder }
		_ = json.Unmarshal([]byte(got), &reply)
		reasons := map[string]string{}
		for _, st := range reply.Stops {
			reasons[st.JobUUID] = string(st.Mode) + ": " + st.Reason
		}
		if status != http.StatusOK || !strings.HasPrefix(reasons[onB], "cancel") || reasons[onB] != reasons[unknown] {
			t.Errorf("slave A holding slave B's job in %s: %d %s, want a stop order for it, as for a job that does not exist", path, status, clip(got))
		}
	}
	if after := f.digest(); after != before {
		t.Errorf("slave A's heartbeat with slave B's job changed the database:\nbefore %s\nafter  %s", before, after)
	}
	var usage []byte
	if err := w.m.Store.DB().QueryRowContext(ctx, `SELECT coalesce(scheduling->>'usage', '') || coalesce(final_usage::text, '') FROM jobs WHERE uuid = $1`, onB).Scan(&usage); err != nil || strings.Contains(string(usage), "999") {
		t.Errorf("slave A set the usage of slave B's job: %s %v", usage, err)
	}

	// The disabled slave learns the uuid of the job waiting for it from its heartbeat's view,
	// but can do nothing with it: starting it, logging into it, ending it are refused (409)
	// and change nothing.
	var attempt int
	if err := w.m.Store.DB().QueryRowContext(ctx, `SELECT attempt FROM jobs WHERE uuid = $1`, f.waiting).Scan(&attempt); err != nil {
		t.Fatal(err)
	}
	code := 0
	for path, msg := range map[string]any{
		protocol.UpdatePath: protocol.StateUpdate{JobUUID: f.waiting, Attempt: attempt, From: job.StatusAssigned, To: job.StatusStarting},
		protocol.LogPath:    protocol.LogChunk{JobUUID: f.waiting, Attempt: attempt, Seq: 0, Data: []byte("forged line\n")},
		protocol.DonePath:   protocol.Completion{JobUUID: f.waiting, Attempt: attempt, From: job.StatusAssigned, To: job.StatusFailed, ExitCode: &code},
	} {
		before := f.digest()
		b, _ := json.Marshal(msg)
		if status, got := withdrawn[len(withdrawn)-2].do(t, w.m.URL, "POST", path, string(b), "application/json"); status != http.StatusConflict {
			t.Errorf("the disabled slave acting on the job waiting for it (%s): %d %s, want 409", path, status, clip(got))
		}
		if after := f.digest(); after != before {
			t.Errorf("the disabled slave acting on the job waiting for it (%s) changed the database:\nbefore %s\nafter  %s", path, before, after)
		}
	}

	t.Logf("authorization matrix: %d routes, %d actors, %d calls, %d refused as the rules say; of the actors %d disabled or revoked "+
		"while the master ran: %d refusals with 401, and %d long polls of the disabled slave offered nothing of the job waiting for it",
		len(routes), len(actors), calls, refusals, len(withdrawn)+1, withdrawnRefusals, disabledPolls)
}

// Secrets of the job waiting for the disabled slave node-c (its image's registry password and
// an environment value): no answer to a disabled or revoked caller may hold them.
const (
	matrixImageSecret = "matrix-registry-pw-7f3a"
	matrixEnvSecret   = "matrix-env-token-91c2"
)

// withdrawnActors makes the callers whose rights are taken away while the master runs. Each is
// shown to work first, then an admin (or the certificate's owner) disables or revokes it
// through the API, so the matrix's calls are the next requests after that, on the same
// master, without a restart:
//   - frank, a member of alice's project, and gina, an admin, both disabled;
//   - a second certificate of carol, revoked by carol, and one of dave (an admin), revoked by
//     dave: their users and first certificates keep working (carol and dave stay actors);
//   - slave node-c, disabled, with a job assigned to it (an image password and an environment
//     secret in it) as by a scheduler pass that read the slave just before it was disabled;
//   - slave node-d, its certificate revoked.
func (f *matrixFixture) withdrawnActors(ctx context.Context) []actor {
	t, w, m := f.t, f.w, f.w.m
	t.Helper()
	as := func(u *testmaster.User, method, path, body string) {
		t.Helper()
		if status, got, _ := m.Do(u, method, path, strings.NewReader(body)); status != http.StatusOK {
			t.Fatalf("%s %s as %s: %d %s", method, path, u.Name, status, got)
		}
	}
	works := func(a actor, method, path, body string) {
		t.Helper()
		if status, got := a.do(t, m.URL, method, path, body, "application/json"); status != http.StatusOK {
			t.Fatalf("%s before its rights were taken away: %d %s", a.name, status, clip(got))
		}
	}
	var out []actor

	for _, u := range []struct {
		name string
		u    *testmaster.User
	}{{"frank (disabled, in alice's project)", m.AddUser("frank", false, "", "vision")}, {"gina (disabled admin)", m.AddUser("gina", true, "", "admins")}} {
		a := actor{name: u.name, user: u.u, client: m.Client(&u.u.TLS), refused: true}
		works(a, "GET", apiV+"session", "")
		as(w.dave, "PUT", apiV+"users/"+u.u.Name+"/disabled", `{"disabled": true}`)
		out = append(out, a)
	}

	for _, u := range []struct {
		name string
		u    *testmaster.User
	}{{"carol's revoked certificate", w.carol}, {"dave's revoked certificate (admin)", w.dave}} {
		cert, serial := f.secondCert(u.u)
		a := actor{name: u.name, user: u.u, client: m.Client(&cert), refused: true}
		works(a, "GET", apiV+"session", "")
		as(u.u, "POST", apiV+"certificates/"+serial+"/revoke", "")
		out = append(out, a)
	}

	slaves := map[string]actor{}
	for _, name := range []string{"node-c", "node-d"} {
		cert := m.SlaveCert(name, 1)
		inv, _ := json.Marshal(protocol.Inventory{Name: name, CPUs: 8, MemoryMiB: 32768})
		if _, err := m.Store.RegisterSlave(ctx, store.SlaveRegistration{Name: name, InstanceID: "i" + name[len(name)-1:], Host: name, ClusterID: 1, Inventory: inv}); err != nil {
			t.Fatal(err)
		}
		hb, _ := json.Marshal(protocol.Heartbeat{InstanceID: "i" + name[len(name)-1:], Accepting: true})
		a := actor{name: "slave " + name, slave: name, client: m.Client(&cert)}
		works(a, "POST", protocol.HeartbeatPath, string(hb))
		slaves[name] = a
	}

	// node-c: offered its job (secrets included) while enabled, so the checks below can fail.
	doc := strings.Replace(jobDoc("secret", projectURN("vision")), `"debian:stable"`, `"deploy:`+matrixImageSecret+`@registry.example.org/team/img:v1", "environment": {"TOKEN": "`+matrixEnvSecret+`"}`, 1)
	f.waiting = f.w.submit(t, w.alice, doc, "")
	f.assignToC(ctx)
	next, _ := json.Marshal(protocol.NextRequest{InstanceID: "ic"})
	if status, got := slaves["node-c"].do(t, m.URL, "POST", protocol.NextPath, string(next), "application/json"); status != http.StatusOK ||
		!strings.Contains(got, matrixImageSecret) || !strings.Contains(got, matrixEnvSecret) {
		t.Fatalf("node-c before it was disabled is not offered its job with its secrets: %d %s", status, clip(got))
	}
	as(w.dave, "PUT", apiV+"slaves/node-c/disabled", `{"disabled": true}`)
	if rec, err := m.Store.GetJob(ctx, f.waiting); err != nil || rec.Job.State.Status != job.StatusQueued {
		t.Fatalf("the job node-c had not taken is not queued again when node-c was disabled: %v", err)
	}
	// A scheduler pass that read node-c just before: the job waits for it again.
	if _, err := m.Store.DB().ExecContext(ctx, `UPDATE slaves SET disabled = false WHERE name = 'node-c'`); err != nil {
		t.Fatal(err)
	}
	f.assignToC(ctx)
	if _, err := m.Store.DB().ExecContext(ctx, `UPDATE slaves SET disabled = true WHERE name = 'node-c'`); err != nil {
		t.Fatal(err)
	}
	c := slaves["node-c"]
	c.disabledSlave = true
	out = append(out, c)

	d := slaves["node-d"]
	serial := d.client.Transport.(*http.Transport).TLSClientConfig.Certificates[0].Leaf.SerialNumber.String()
	as(w.dave, "POST", apiV+"certificates/"+serial+"/revoke", "")
	d.refused = true
	return append(out, d)
}

// serviceActors are the callers with a service certificate (issue 13): acting for alice, for
// dave (an admin: the service gets none of his rights), without the act-as header, and one
// revoked while the master ran (shown to work first).
func (f *matrixFixture) serviceActors() []actor {
	t, w, m := f.t, f.w, f.w.m
	t.Helper()
	hub := m.AddService("jupyterhub")
	out := []actor{
		{name: "service for alice", user: w.alice, service: hub.Name, client: m.Client(&hub.TLS)},
		{name: "service for dave (admin)", user: w.dave, service: hub.Name, client: m.Client(&hub.TLS)},
		{name: "service without act-as", service: hub.Name, client: m.Client(&hub.TLS)},
	}
	gone := m.AddService("gone")
	a := actor{name: "revoked service for alice", user: w.alice, service: gone.Name, client: m.Client(&gone.TLS), refused: true}
	if status, got := a.do(t, m.URL, "GET", apiV+"jobs", "", ""); status != http.StatusOK {
		t.Fatalf("%s before it was revoked: %d %s", a.name, status, clip(got))
	}
	if _, err := m.Store.RevokeService(context.Background(), gone.Name); err != nil {
		t.Fatal(err)
	}
	return append(out, a)
}

// assignToC assigns the waiting job to node-c, as a scheduler pass would.
func (f *matrixFixture) assignToC(ctx context.Context) {
	f.t.Helper()
	done, err := f.w.m.Store.AssignJobs(ctx, []store.Assignment{{JobUUID: f.waiting, Message: "assigned", Placement: store.Placement{
		SlaveName: "node-c", SlaveInstanceID: "ic", ClusterID: 1, Resources: job.StateResources{ClusterID: 1, SlaveName: "node-c", CPUIDs: []int{0}, CPUMemoryGb: 1}}}})
	if err != nil || len(done) != 1 {
		f.t.Fatalf("assign the waiting job to node-c: %v %v", done, err)
	}
}

// checkDisabledSlave checks an answer to the disabled slave node-c: the slave protocol answers
// it (it reports the jobs it runs), the long poll offers nothing though the job still waits
// for it, and it stays disabled whatever it sends. It returns 1 for a long poll.
func (f *matrixFixture) checkDisabledSlave(route, name string, status int, got string) int {
	t, ctx := f.t, context.Background()
	t.Helper()
	if sl, err := f.w.m.Store.GetSlave(ctx, "node-c"); err != nil || !sl.Disabled {
		t.Errorf("%s: node-c is no longer disabled (%v)", name, err)
	}
	switch route {
	case "POST " + protocol.RegisterPath, "POST " + protocol.HeartbeatPath:
		if status != http.StatusOK {
			t.Errorf("%s: %d %s, want 200 (a disabled slave still reports its jobs)", name, status, clip(got))
		}
	case "POST " + protocol.NextPath:
		var work protocol.Work
		if err := json.Unmarshal([]byte(got), &work); status != http.StatusOK || err != nil || len(work.Assignments) != 0 {
			t.Errorf("%s: %d %s, want 200 without assignments", name, status, clip(got))
		}
		var st, on string
		if err := f.w.m.Store.DB().QueryRowContext(ctx, `SELECT status, coalesce(assigned_slave_name, '') FROM jobs WHERE uuid = $1`, f.waiting).Scan(&st, &on); err != nil ||
			st != string(job.StatusAssigned) || on != "node-c" {
			t.Errorf("%s: the job is no longer waiting for node-c (%s on %q, %v): the check proves nothing", name, st, on, err)
		}
		return 1
	}
	return 0
}

// secondCert issues and records another certificate of u (as a renewal in the portal does).
func (f *matrixFixture) secondCert(u *testmaster.User) (tls.Certificate, string) {
	f.t.Helper()
	cert, key, err := f.w.m.CA.IssueClient(pki.ClientSpec{Kind: pki.KindUser, URN: u.URN, Email: u.Email, Name: u.Name})
	if err != nil {
		f.t.Fatalf("issue a certificate of %s: %v", u.Name, err)
	}
	serial := cert.SerialNumber.String()
	if err := f.w.m.Store.RecordCertificate(context.Background(), serial, store.CertUser, u.Name, cert.NotAfter, ""); err != nil {
		f.t.Fatalf("record the certificate of %s: %v", u.Name, err)
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}, serial
}

// runningOnB lists, for slave A, the jobs on slave B (as if it held them, with usage); for
// slave B, nothing new.
func (f *matrixFixture) runningOnB(t *testing.T, a actor) []protocol.RunningJob {
	if a.slave != "node-a" {
		return nil
	}
	id := f.fresh(slaveBJob)
	return []protocol.RunningJob{{JobUUID: id, Attempt: 1, Status: job.StatusRunning, Usage: &protocol.Usage{CPUPercent: 999, MemoryMiB: 1}}}
}

// newSSHKey is a fresh ed25519 public key in authorized_keys form.
func newSSHKey() string {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	var b bytes.Buffer
	for _, part := range [][]byte{[]byte("ssh-ed25519"), pub} {
		_ = binary.Write(&b, binary.BigEndian, uint32(len(part)))
		b.Write(part)
	}
	return "ssh-ed25519 " + base64.StdEncoding.EncodeToString(b.Bytes()) + " matrix@test"
}

// matrixJob names no project: the submitter's only project is taken (a user in none is refused).
const matrixJob = `{"name": "m", "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1}, "docker": {"image": "debian:stable", "command": "echo hi"}}}`
