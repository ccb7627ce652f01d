package web_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

func TestLivePages(t *testing.T) {
	p := newPortal(t)
	alice := p.m.AddUser("alice", false, "", "demo")
	carol := p.m.AddUser("carol", false, "", "ml")
	ctx := context.Background()

	r := p.get(alice, "/live/slaves").expect(http.StatusOK)
	if !strings.Contains(textOf(r.one("data-testid", "slaves-empty")), "slave-token") {
		t.Errorf("empty slaves page")
	}
	r = p.get(alice, "/live/clusters").expect(http.StatusOK)
	r.one("data-testid", "clusters-empty")

	p.m.SlaveCert("node1", 1)
	inv, _ := json.Marshal(protocol.Inventory{Name: "node1", CPUs: 8, MemoryMiB: 32768, CudaVersion: "12.4", GPUStatus: "fake",
		GPUs: []protocol.GPU{{Index: 0, UUID: "GPU-0", Model: "V100-32GB", MemoryMiB: 32768, Fake: true}, {Index: 1, UUID: "GPU-1", Model: "V100-32GB", MemoryMiB: 32768, Fake: true}}})
	if _, err := p.m.Store.RegisterSlave(ctx, store.SlaveRegistration{Name: "node1", InstanceID: "i1", Host: "node1.example.org", ClusterID: 1, Inventory: inv}); err != nil {
		t.Fatal(err)
	}
	id := p.submit(carol, jobDoc("carols-job", projectURN("ml")))
	gpus, _ := json.Marshal([]protocol.GPU{{Index: 1, UUID: "GPU-1", Model: "V100-32GB", MemoryMiB: 32768, Fake: true}})
	if _, err := p.m.Store.AssignJobs(ctx, []store.Assignment{{JobUUID: id, Message: "assigned", Placement: store.Placement{SlaveName: "node1", SlaveInstanceID: "i1", ClusterID: 1,
		Resources: job.StateResources{ClusterID: 1, SlaveName: "node1", GPUIDs: []int{1}, CPUIDs: []int{0}, CPUMemoryGb: 1, GPUDetails: gpus}}}}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		hx      bool
		link    bool
		jobText string
	}{
		{"owner sees his job", false, true, "carols-job"},
		{"others see it sanitized", false, false, "job-" + id[:6]},
		{"htmx partial", true, false, "job-" + id[:6]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := alice
			if tc.link {
				u = carol
			}
			var hdr []string
			if tc.hx {
				hdr = []string{"HX-Request", "true"}
			}
			r := p.get(u, "/live/slaves", hdr...).expect(http.StatusOK)
			if tc.hx && !strings.HasPrefix(strings.TrimSpace(r.body()), `<div id="slave-list"`) {
				t.Errorf("partial: %s", clip(r.body()))
			}
			card := r.one("data-testid", "slave-node1")
			if len(findAll(card, "data-testid", "slave-fake")) != 1 {
				t.Errorf("fake GPUs not marked")
			}
			gpu1 := findAll(card, "data-testid", "gpu-node1-1")
			if len(gpu1) != 1 || !strings.Contains(textOf(gpu1[0]), tc.jobText) {
				t.Fatalf("GPU 1 row: %v", gpu1)
			}
			if got := len(findAll(gpu1[0], "href", "/jobs/"+id)); (got == 1) != tc.link {
				t.Errorf("job link on GPU 1: %d", got)
			}
			if strings.Contains(textOf(card), "carols-job") != tc.link {
				t.Errorf("job name leaks or is missing")
			}
			gpu0 := findAll(card, "data-testid", "gpu-node1-0")
			if len(gpu0) != 1 || !strings.Contains(textOf(gpu0[0]), "free") {
				t.Errorf("GPU 0 row")
			}
			if !strings.Contains(textOf(findAll(card, "data-testid", "slave-gpus")[0]), "1 / 2") {
				t.Errorf("free GPUs: %s", textOf(findAll(card, "data-testid", "slave-gpus")[0]))
			}
		})
	}

	// Utilisation comes from the heartbeat's usage (a fake GPU shows none).
	usage, _ := json.Marshal([]protocol.RunningJob{{JobUUID: id, Usage: &protocol.Usage{GPUs: []protocol.GPUUsage{{Index: 1, UtilPercent: 37}}}}})
	if _, err := p.m.Store.Heartbeat(ctx, store.Beat{Slave: "node1", InstanceID: "i1", Usage: usage}); err != nil {
		t.Fatal(err)
	}
	r = p.get(alice, "/live/slaves").expect(http.StatusOK)
	if u := textOf(findAll(r.one("data-testid", "gpu-node1-1"), "data-testid", "gpu-util")[0]); u != "–" {
		t.Errorf("fake GPU utilisation %q", u)
	}

	// JSON is the API's GET slaves / GET clusters.
	r = p.get(alice, "/live/slaves", "Accept", "application/json").expect(http.StatusOK)
	var slaves []handlers.SlaveInfo
	if err := json.Unmarshal([]byte(r.body()), &slaves); err != nil || len(slaves) != 1 || slaves[0].GPUs.Free != 1 {
		t.Errorf("slaves json: %v %+v", err, slaves)
	}
	r = p.get(alice, "/live/clusters").expect(http.StatusOK)
	row := r.one("data-testid", "cluster-1")
	if !strings.Contains(textOf(findAll(row, "data-testid", "cluster-gpus")[0]), "1 / 2") || !strings.Contains(textOf(row), "V100-32GB") {
		t.Errorf("cluster row: %s", textOf(row))
	}
	r = p.get(alice, "/live/clusters", "Accept", "application/json").expect(http.StatusOK)
	var clusters []handlers.ClusterInfo
	if err := json.Unmarshal([]byte(r.body()), &clusters); err != nil || len(clusters) != 1 || clusters[0].GPUs.Total != 2 {
		t.Errorf("clusters json: %v %+v", err, clusters)
	}
}

// sshKey makes a valid ed25519 public key line.
func sshKey(t *testing.T, comment string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var blob []byte
	for _, part := range [][]byte{[]byte("ssh-ed25519"), pub} {
		blob = binary.BigEndian.AppendUint32(blob, uint32(len(part)))
		blob = append(blob, part...)
	}
	return "ssh-ed25519 " + base64.StdEncoding.EncodeToString(blob) + " " + comment
}

func TestProfilePage(t *testing.T) {
	p := newPortal(t)
	alice := p.m.AddUser("alice", false, "", "demo")
	bob := p.m.AddUser("bob", false, "")

	r := p.get(alice, "/profile").expect(http.StatusOK)
	if textOf(r.one("data-testid", "profile-urn")) != alice.URN {
		t.Errorf("profile URN")
	}
	r.one("data-testid", "profile-project-demo")
	r.one("data-testid", "ssh-keys-empty")

	t.Run("certificate", func(t *testing.T) {
		for _, password := range []string{"", "s3cret"} {
			r := p.post(alice, "/profile/certificate", url.Values{"password": {password}, "password2": {password}}).expect(http.StatusOK)
			if cd := r.header().Get("Content-Disposition"); cd != `attachment; filename="gpulab-alice.pem"` {
				t.Errorf("Content-Disposition %q", cd)
			}
			pemData := []byte(r.body())
			if password != "" {
				if _, err := pki.LoadClientPEM(pemData, ""); err == nil {
					t.Errorf("an encrypted key loads without password")
				}
			}
			// The file works as gpulab-cli reads it: against the real master's API.
			cert, err := pki.LoadClientPEM(pemData, password)
			if err != nil {
				t.Fatalf("load downloaded PEM: %v", err)
			}
			resp, err := p.m.Client(&cert).Get(p.m.APIBase + "/jobs")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("API with the downloaded certificate: %d %s", resp.StatusCode, body)
			}
			id, err := pki.IdentityOf(cert.Leaf)
			if err != nil || id.URN != alice.URN || id.Email != alice.Email {
				t.Errorf("identity %+v %v", id, err)
			}
		}
		r := p.post(alice, "/profile/certificate", url.Values{"password": {"a"}, "password2": {"b"}}).expect(http.StatusBadRequest)
		r.one("data-testid", "error-certificate")
	})

	t.Run("ssh keys", func(t *testing.T) {
		key := sshKey(t, "alice@laptop")
		r := p.post(alice, "/profile/ssh-keys", url.Values{"public_key": {"  " + key + "\n"}}).expect(http.StatusSeeOther)
		if r.header().Get("Location") != "/profile#ssh-keys" {
			t.Errorf("location %q", r.header().Get("Location"))
		}
		keys, err := p.m.Store.ListSSHKeys(context.Background(), alice.ID)
		if err != nil || len(keys) != 1 || keys[0].PublicKey != key || keys[0].Name != "alice@laptop" || !strings.HasPrefix(keys[0].Fingerprint, "SHA256:") {
			t.Fatalf("stored keys %+v %v", keys, err)
		}
		r = p.get(alice, "/profile").expect(http.StatusOK)
		item := r.one("data-testid", "ssh-key-"+strconv.FormatInt(keys[0].ID, 10))
		if !strings.Contains(textOf(item), keys[0].Fingerprint) {
			t.Errorf("key not listed")
		}
		r = p.post(alice, "/profile/ssh-keys", url.Values{"public_key": {key}}).expect(http.StatusConflict)
		r.one("data-testid", "error-public_key")
		for _, bad := range []string{"ssh-ed25519", "ssh-foo AAAA", "ssh-ed25519 !!!", "ssh-rsa " + strings.Fields(key)[1],
			"-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----"} {
			r = p.post(alice, "/profile/ssh-keys", url.Values{"public_key": {bad}, "name": {"n"}}).expect(http.StatusBadRequest)
			if r.fieldValue("ssh-key-text") != bad && !strings.Contains(bad, "\n") {
				t.Errorf("typed key lost")
			}
		}
		// Bob cannot remove alice's key; alice can.
		del := "/profile/ssh-keys/" + strconv.FormatInt(keys[0].ID, 10) + "/delete"
		p.post(bob, del, nil).expect(http.StatusNotFound)
		p.post(alice, del, nil).expect(http.StatusSeeOther)
		if keys, _ := p.m.Store.ListSSHKeys(context.Background(), alice.ID); len(keys) != 0 {
			t.Errorf("key not removed")
		}
	})
}

func TestParseSSHPublicKey(t *testing.T) {
	key := sshKey(t, "me@host with spaces")
	k, err := handlers.ParseSSHPublicKey(key)
	if err != nil || k.Type != "ssh-ed25519" || k.Comment != "me@host with spaces" || k.Line != key {
		t.Errorf("%+v %v", k, err)
	}
	if _, err := handlers.ParseSSHPublicKey(strings.Join(strings.Fields(key)[:2], " ")); err != nil {
		t.Errorf("key without comment: %v", err)
	}
}

func TestAdminPage(t *testing.T) {
	p := newPortal(t)
	alice := p.m.AddUser("alice", false, "", "demo")
	root := p.m.AddUser("root", true, "")
	ctx := context.Background()

	r := p.get(alice, "/admin").expect(http.StatusForbidden)
	if attrOf(r.one("data-testid", "error-page"), "data-status") != "403" {
		t.Errorf("non-admin")
	}
	p.post(alice, "/admin/projects", url.Values{"name": {"evil"}}).expect(http.StatusForbidden)

	r = p.get(root, "/admin").expect(http.StatusOK)
	r.one("data-testid", "admin-user-alice")
	r.one("data-testid", "member-demo-alice")
	r.one("data-testid", "admin-clusters-empty")
	r.one("data-testid", "admin-slaves-empty")

	// Projects and members.
	p.post(root, "/admin/projects", url.Values{"name": {"vision"}, "description": {"CV group"}}).expect(http.StatusSeeOther)
	p.post(root, "/admin/projects", url.Values{"name": {"vision"}}).expect(http.StatusConflict)
	p.post(root, "/admin/projects", url.Values{"name": {"Bad Name"}}).expect(http.StatusBadRequest)
	vision, err := p.m.Store.GetProjectByName(ctx, "vision")
	if err != nil || vision.URN != projectURN("vision") {
		t.Fatalf("project %+v %v", vision, err)
	}
	vid := strconv.FormatInt(vision.ID, 10)
	p.post(root, "/admin/projects/"+vid+"/members", url.Values{"user": {"newbie"}}).expect(http.StatusSeeOther)
	p.post(root, "/admin/projects/"+vid+"/members", url.Values{"user": {"alice"}}).expect(http.StatusSeeOther)
	p.post(root, "/admin/projects/99999/members", url.Values{"user": {"alice"}}).expect(http.StatusNotFound)
	members, err := p.m.Store.ListMembers(ctx, vision.ID)
	if err != nil || len(members) != 2 || members[0].Name != "alice" || members[1].Name != "newbie" {
		t.Fatalf("members %+v %v", members, err)
	}
	r = p.get(root, "/admin").expect(http.StatusOK)
	r.one("data-testid", "member-vision-newbie")
	p.post(root, "/admin/projects/"+vid+"/members/"+strconv.FormatInt(members[1].ID, 10)+"/delete", nil).expect(http.StatusSeeOther)
	p.post(root, "/admin/projects/"+vid+"/members/"+strconv.FormatInt(members[1].ID, 10)+"/delete", nil).expect(http.StatusNotFound)

	// Users.
	p.post(root, "/admin/users/"+strconv.FormatInt(alice.ID, 10)+"/admin", url.Values{"admin": {"true"}}).expect(http.StatusSeeOther)
	if u, _ := p.m.Store.GetUserByName(ctx, "alice"); !u.IsAdmin {
		t.Errorf("alice is no admin")
	}
	p.post(root, "/admin/users/"+strconv.FormatInt(root.ID, 10)+"/admin", url.Values{"admin": {"false"}}).expect(http.StatusConflict)
	p.post(root, "/admin/users/"+strconv.FormatInt(alice.ID, 10)+"/admin", url.Values{"admin": {"maybe"}}).expect(http.StatusBadRequest)

	// Clusters.
	p.post(root, "/admin/clusters", url.Values{"id": {"7"}, "name": {"gpu-farm"}, "private": {"true"}}).expect(http.StatusSeeOther)
	p.post(root, "/admin/clusters", url.Values{"id": {"7"}}).expect(http.StatusConflict)
	p.post(root, "/admin/clusters", url.Values{"id": {"zero"}}).expect(http.StatusBadRequest)
	p.post(root, "/admin/clusters/7/owners", url.Values{"project": {vid}}).expect(http.StatusSeeOther)
	p.post(root, "/admin/clusters/8/owners", url.Values{"project": {vid}}).expect(http.StatusNotFound)
	owners, err := p.m.Store.ClusterOwners(ctx)
	if err != nil || len(owners[7]) != 1 || owners[7][0] != vision.ID {
		t.Errorf("owners %v %v", owners, err)
	}
	r = p.get(root, "/admin").expect(http.StatusOK)
	r.one("data-testid", "owner-7-vision")
	p.post(root, "/admin/clusters/7/private", url.Values{"private": {"false"}}).expect(http.StatusSeeOther)
	if cl, _ := p.m.Store.GetCluster(ctx, 7); cl.Private {
		t.Errorf("cluster still private")
	}
	p.post(root, "/admin/clusters/7/owners/"+vid+"/delete", nil).expect(http.StatusSeeOther)
	p.post(root, "/admin/clusters/7/owners/"+vid+"/delete", nil).expect(http.StatusNotFound)

	// Slaves: drain and open.
	p.m.SlaveCert("node1", 7)
	p.post(root, "/admin/slaves/node1/accepting", url.Values{"accepting": {"false"}}).expect(http.StatusSeeOther)
	if s, _ := p.m.Store.GetSlave(ctx, "node1"); s.AcceptingJobs {
		t.Errorf("slave not drained")
	}
	r = p.get(root, "/admin").expect(http.StatusOK)
	r.one("data-testid", "open-slave")
	p.post(root, "/admin/slaves/node1/accepting", url.Values{"accepting": {"true"}}).expect(http.StatusSeeOther)
	p.post(root, "/admin/slaves/ghost/accepting", url.Values{"accepting": {"true"}}).expect(http.StatusNotFound)
}

// The pages are mounted in the master's route table: a client certificate is a caller too,
// and the static files need no login.
func TestPagesServedByMaster(t *testing.T) {
	p := newPortal(t)
	alice := p.m.AddUser("alice", false, "", "demo")
	status, body, hdr := p.m.Do(alice, "GET", "/jobs", nil, "Accept", "text/html")
	if status != http.StatusOK || !strings.Contains(string(body), `id="job-list"`) || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
		t.Errorf("GET /jobs: %d %s", status, clip(string(body)))
	}
	status, body, hdr = p.m.Do(nil, "GET", "/static/gpulab.css", nil)
	if status != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/css") || len(body) < 1000 {
		t.Errorf("GET /static/gpulab.css: %d %q", status, hdr.Get("Content-Type"))
	}
	status, _, _ = p.m.Do(nil, "GET", "/static/htmx.min.js", nil)
	if status != http.StatusOK {
		t.Errorf("GET /static/htmx.min.js: %d", status)
	}
}

// The reservations calendar: an admin books with the form (errors name the field), holders see
// their reservation marked as theirs with the id to name, others see nothing, and a named user
// deletes his own.
func TestReservationsPage(t *testing.T) {
	p := newPortal(t)
	ctx := context.Background()
	alice := p.m.AddUser("alice", false, "", "demo")
	bob := p.m.AddUser("bob", false, "", "demo")
	carol := p.m.AddUser("carol", false, "", "other")
	root := p.m.AddUser("root", true, "")
	if _, err := p.m.Store.CreateCluster(ctx, store.Cluster{ID: 3, Name: "three"}); err != nil {
		t.Fatal(err)
	}
	r := p.get(alice, "/reservations").expect(http.StatusOK)
	r.one("data-testid", "reservations-empty")
	if r.has("id", "create-reservation-form") {
		t.Error("a non-admin sees the booking form")
	}
	root0 := p.get(root, "/reservations").expect(http.StatusOK)
	root0.one("id", "create-reservation-form")

	start := time.Now().UTC().Add(24 * time.Hour).Truncate(time.Minute)
	form := func(extra ...string) url.Values {
		v := url.Values{"name": {"course"}, "clusterId": {"3"}, "gpus": {"2"}, "start": {start.Format("2006-01-02T15:04")},
			"end": {start.Add(48 * time.Hour).Format("2006-01-02T15:04")}, "users": {"alice"}, "projects": {""}}
		for i := 0; i+1 < len(extra); i += 2 {
			v.Set(extra[i], extra[i+1])
		}
		return v
	}
	p.post(alice, "/reservations", form()).expect(http.StatusForbidden)
	for field, bad := range map[string][]string{
		"end":       {"end", start.Add(-time.Hour).Format("2006-01-02T15:04")},
		"start":     {"start", "tomorrow"},
		"users":     {"users", "nobody"},
		"clusterId": {"clusterId", "9"},
	} {
		r := p.post(root, "/reservations", form(bad...)).expect(http.StatusBadRequest)
		if !strings.Contains(r.body(), field) {
			t.Errorf("bad %s: the error does not name the field: %s", field, clip(r.body()))
		}
	}
	p.post(root, "/reservations", form()).expect(http.StatusSeeOther)
	list, err := p.m.Store.ListReservations(ctx, time.Now())
	if err != nil || len(list) != 1 || list[0].GPUs != 2 || !list[0].Start.Equal(start) {
		t.Fatalf("stored %+v %v", list, err)
	}
	id := list[0].ID

	r = p.get(alice, "/reservations").expect(http.StatusOK)
	r.one("data-testid", "calendar-"+id)
	if n := len(r.find("data-testid", "cal-on")); n < 2 || n > 3 {
		t.Errorf("a two-day reservation marks %d days", n)
	}
	row := r.one("data-testid", "reservation-"+id)
	if got := textOf(row); !strings.Contains(got, "2 GPUs of cluster 3") || !strings.Contains(got, "users alice") {
		t.Errorf("row: %s", got)
	}
	if len(findAll(row, "data-testid", "reservation-mine")) != 1 || len(findAll(row, "data-testid", "delete-reservation")) != 1 {
		t.Error("alice's reservation is not shown as hers with a delete button")
	}
	p.get(carol, "/reservations").expect(http.StatusOK).one("data-testid", "reservations-empty")
	if r := p.get(bob, "/reservations").expect(http.StatusOK); r.has("data-testid", "reservation-"+id) {
		t.Error("bob, neither named nor in a holding project, sees the reservation")
	}

	p.post(carol, "/reservations/"+id+"/delete", nil).expect(http.StatusNotFound)
	p.post(alice, "/reservations/"+id+"/delete", nil).expect(http.StatusSeeOther)
	p.get(alice, "/reservations").expect(http.StatusOK).one("data-testid", "reservations-empty")
}
