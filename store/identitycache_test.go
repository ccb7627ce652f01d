package store_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// caller is what GetUserWithProjectsAndCert read of a caller.
type caller struct {
	user      store.User
	projects  []int64
	certState string
}

// readCaller reads alice's identity with her certificate and reports whether it was served
// from the identity kept (a hit), checking that GetUserAndJob reads the same.
func readCaller(t *testing.T, st *store.Store, urn, serial, jobID string) (caller, bool) {
	t.Helper()
	ctx := context.Background()
	hits, _ := st.IdentityStats()
	u, projects, state, err := st.GetUserWithProjectsAndCert(ctx, urn, serial)
	if err != nil {
		t.Fatalf("read caller: %v", err)
	}
	after, _ := st.IdentityStats()
	u2, projects2, state2, rec, err := st.GetUserAndJob(ctx, urn, serial, jobID)
	if err != nil {
		t.Fatalf("read caller and job: %v", err)
	}
	// The certificate's state may only move on between the two reads: one ending between them
	// (the expiry step below) is read valid, then expired.
	sameState := state2 == state || state == "valid" && state2 == "expired"
	if u2 != u || !slices.Equal(projects2, projects) || !sameState || rec.Job.UUID != jobID {
		t.Fatalf("GetUserAndJob read %+v %v %q (job %s), GetUserWithProjectsAndCert %+v %v %q", u2, projects2, state2, rec.Job.UUID, u, projects, state)
	}
	return caller{user: u, projects: projects, certState: state}, after > hits
}

// TestIdentityKeptUntilItChanges: a caller's identity is read once and then served from what
// the master kept, until anything it is made of changes, by whatever writer (here SQL of its
// own, as another master's or an operator's would be): each change shows at the very next
// read. A certificate's expiry, which no write makes, shows by the database's clock.
func TestIdentityKeptUntilItChanges(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	alice, vision := fixture(t, st, "alice", "vision")
	_, audio := fixture(t, st, "bob", "audio")
	j := createJob(t, st, alice, vision, job.StatusFinished)
	if err := st.RecordCertificate(ctx, "a1", "user", alice.URN, time.Now().Add(time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := st.DB().ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	c, hit := readCaller(t, st, alice.URN, "a1", j.UUID)
	if hit || c.certState != "valid" || !slices.Equal(c.projects, []int64{vision.ID}) || c.user.ID != alice.ID {
		t.Fatalf("first read: %+v, hit %v", c, hit)
	}
	if _, hit := readCaller(t, st, alice.URN, "a1", j.UUID); !hit {
		t.Fatal("the second read of an unchanged identity read it again")
	}
	// Writes that change nothing a caller is made of leave it kept.
	exec(`UPDATE users SET email = email WHERE id = $1`, alice.ID)
	if err := st.RecordCertificate(ctx, "s1", "slave", "urn:publicid:IDN+test+slave+node1", time.Now().Add(time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	if _, hit := readCaller(t, st, alice.URN, "a1", j.UUID); !hit {
		t.Fatal("a write that changed no user's row, or a slave's certificate, made the identity read again")
	}

	for _, ch := range []struct {
		name  string
		write func()
		check func(c caller) bool
	}{
		{"membership added", func() { exec(`INSERT INTO memberships (user_id, project_id) VALUES ($1, $2)`, alice.ID, audio.ID) },
			func(c caller) bool { return slices.Equal(c.projects, []int64{audio.ID, vision.ID}) }},
		{"membership removed", func() { exec(`DELETE FROM memberships WHERE user_id = $1 AND project_id = $2`, alice.ID, vision.ID) },
			func(c caller) bool { return slices.Equal(c.projects, []int64{audio.ID}) }},
		{"memberships truncated", func() { exec(`TRUNCATE memberships`) },
			func(c caller) bool { return len(c.projects) == 0 }},
		{"made admin", func() { exec(`UPDATE users SET is_admin = TRUE WHERE id = $1`, alice.ID) },
			func(c caller) bool { return c.user.IsAdmin }},
		{"disabled", func() { exec(`UPDATE users SET disabled = TRUE WHERE id = $1`, alice.ID) },
			func(c caller) bool { return c.user.Disabled && c.user.IsAdmin }},
		{"certificate revoked", func() { exec(`UPDATE certificates SET revoked_at = now() WHERE serial = 'a1'`) },
			func(c caller) bool { return c.certState == "revoked" }},
		{"certificate record deleted", func() { exec(`DELETE FROM certificates WHERE serial = 'a1'`) },
			func(c caller) bool { return c.certState == "" }},
		{"certificate recorded", func() {
			if err := st.RecordCertificate(ctx, "a1", "user", alice.URN, time.Now().Add(time.Hour), ""); err != nil {
				t.Fatal(err)
			}
		}, func(c caller) bool { return c.certState == "valid" }},
	} {
		ch.write()
		c, hit := readCaller(t, st, alice.URN, "a1", j.UUID)
		if hit || !ch.check(c) {
			t.Fatalf("after %s: read %+v (kept: %v)", ch.name, c, hit)
		}
		if c2, hit := readCaller(t, st, alice.URN, "a1", j.UUID); !hit || !ch.check(c2) {
			t.Fatalf("after %s, the read after: %+v (kept: %v)", ch.name, c2, hit)
		}
	}

	// Expiry: nothing is written, the database's clock passes the certificate's end.
	exec(`INSERT INTO certificates (serial, kind, owner, not_after) VALUES ('a2', 'user', $1, now() + interval '1 second')`, alice.URN)
	if c, _ := readCaller(t, st, alice.URN, "a2", j.UUID); c.certState != "valid" {
		t.Fatalf("certificate before its end: %q", c.certState)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		c, hit := readCaller(t, st, alice.URN, "a2", j.UUID)
		if !hit {
			t.Fatal("the identity was read again although nothing changed")
		}
		if c.certState == "expired" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("certificate still %q a minute after its end", c.certState)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A user who does not exist is not found, however often asked.
	for range 2 {
		if _, _, _, err := st.GetUserWithProjectsAndCert(ctx, "urn:publicid:IDN+test+user+nobody", "a1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown user: %v, want ErrNotFound", err)
		}
	}
	if _, _, _, _, err := st.GetUserAndJob(ctx, alice.URN, "a1", "00000000-0000-0000-0000-000000000000"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown job: %v, want ErrNotFound", err)
	}
}

// TestIdentityReadInsideATransaction: a transaction sees its own changes to a caller, and
// what it read is not kept: after a rollback, and another change committed since, the caller
// is as the database has him.
func TestIdentityReadInsideATransaction(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	alice, vision := fixture(t, st, "alice", "vision")
	fixture(t, st, "bob", "audio")
	j := createJob(t, st, alice, vision, job.StatusFinished)
	if err := st.RecordCertificate(ctx, "a1", "user", alice.URN, time.Now().Add(time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	if c, _ := readCaller(t, st, alice.URN, "a1", j.UUID); c.certState != "valid" {
		t.Fatalf("before: %+v", c)
	}
	rollback := errors.New("roll back")
	err := st.WithTx(ctx, func(tx *store.Store) error {
		if _, err := tx.RevokeCertificate(ctx, "a1"); err != nil {
			return err
		}
		if c, _ := readCaller(t, tx, alice.URN, "a1", j.UUID); c.certState != "revoked" {
			t.Errorf("inside the transaction that revoked it: %+v", c)
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatal(err)
	}
	// Another change moves the generation once more.
	if _, err := st.DB().ExecContext(ctx, `UPDATE users SET email = 'bob@example.net' WHERE name = 'bob'`); err != nil {
		t.Fatal(err)
	}
	if c, _ := readCaller(t, st, alice.URN, "a1", j.UUID); c.certState != "valid" {
		t.Fatalf("after the rollback: %+v", c)
	}
}

// TestJobReadWithoutJoins: once the caller and a job's owner and project were read, a GET of
// the job reads its row alone, and makes the very record that reading everything makes; a
// change to the owner's or the project's row shows at the next read.
func TestJobReadWithoutJoins(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	alice, vision := fixture(t, st, "alice", "vision")
	bob, audio := fixture(t, st, "bob", "audio")
	mine := createJob(t, st, alice, vision, job.StatusFinished)
	his := createJob(t, st, bob, audio, job.StatusQueued)
	if err := st.RecordCertificate(ctx, "a1", "user", alice.URN, time.Now().Add(time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	read := func(id string) (*store.JobRecord, bool) {
		t.Helper()
		before := st.JobsReadAlone()
		_, _, state, rec, err := st.GetUserAndJob(ctx, alice.URN, "a1", id)
		if err != nil || state != "valid" {
			t.Fatalf("read job %s: %v (certificate %q)", id, err, state)
		}
		want, err := st.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.UserID != want.UserID || rec.UserName != want.UserName || rec.ProjectID != want.ProjectID || rec.ProjectName != want.ProjectName ||
			rec.ProjectGID != want.ProjectGID || rec.Attempt != want.Attempt || rec.Version != want.Version || !reflect.DeepEqual(rec.Job, want.Job) {
			t.Fatalf("GetUserAndJob made %+v\n%+v\nGetJob %+v\n%+v", *rec, *rec.Job, *want, *want.Job)
		}
		return rec, st.JobsReadAlone() > before
	}
	if _, alone := read(mine.UUID); alone {
		t.Fatal("the first read of the caller read the job alone")
	}
	if _, alone := read(mine.UUID); !alone {
		t.Fatal("the second read of the same job read more than its row")
	}
	// A caller's own names and his projects' come with his identity: his own jobs need no
	// other read, even the first time.
	if _, err := st.DB().ExecContext(ctx, `UPDATE users SET email = 'alice@example.net' WHERE id = $1`, alice.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := st.GetUserWithProjectsAndCert(ctx, alice.URN, "a1"); err != nil {
		t.Fatal(err)
	}
	if _, alone := read(mine.UUID); !alone {
		t.Fatal("the caller's own job, after his identity was read, read more than its row")
	}
	// What GetUserAndJob hands out shares the kept decoding; the copies GetJob hands out do
	// not: changing one leaves the next read as it was.
	cp, err := st.GetJob(ctx, mine.UUID)
	if err != nil {
		t.Fatal(err)
	}
	cp.Job.Request.Docker.Environment = map[string]string{"X": "changed"}
	cp.Job.State.EventTimes["CHANGED"] = time.Now()
	if rec, _ := read(mine.UUID); rec.Job.Request.Docker.Environment["X"] != "" || !rec.Job.State.EventTimes["CHANGED"].IsZero() {
		t.Fatalf("a copy's change reached the shared record: %v %v", rec.Job.Request.Docker.Environment, rec.Job.State.EventTimes)
	}
	if _, alone := read(his.UUID); alone {
		t.Fatal("another owner's job, never read, was read without its owner's names")
	}
	if _, alone := read(his.UUID); !alone {
		t.Fatal("the second read of another owner's job read more than its row")
	}
	for _, ch := range []struct {
		sql   string
		check func(rec *store.JobRecord) bool
	}{
		{`UPDATE users SET name = 'robert' WHERE id = ` + strconv.FormatInt(bob.ID, 10),
			func(rec *store.JobRecord) bool { return rec.UserName == "robert" && rec.Job.Owner.UserURN == bob.URN }},
		{`UPDATE users SET urn = 'urn:publicid:IDN+test+user+robert' WHERE id = ` + strconv.FormatInt(bob.ID, 10),
			func(rec *store.JobRecord) bool { return rec.Job.Owner.UserURN == "urn:publicid:IDN+test+user+robert" }},
		{`UPDATE projects SET name = 'sound', gid = 4242 WHERE id = ` + strconv.FormatInt(audio.ID, 10),
			func(rec *store.JobRecord) bool { return rec.ProjectName == "sound" && rec.ProjectGID == 4242 }},
		{`UPDATE projects SET urn = 'urn:publicid:IDN+test+project+sound' WHERE id = ` + strconv.FormatInt(audio.ID, 10),
			func(rec *store.JobRecord) bool {
				return rec.Job.Owner.ProjectURN == "urn:publicid:IDN+test+project+sound"
			}},
	} {
		if _, err := st.DB().ExecContext(ctx, ch.sql); err != nil {
			t.Fatal(err)
		}
		if rec, alone := read(his.UUID); alone || !ch.check(rec) {
			t.Fatalf("after %s: %+v (read alone: %v)", ch.sql, *rec, alone)
		}
		if rec, alone := read(his.UUID); !alone || !ch.check(rec) {
			t.Fatalf("after %s, the read after: %+v (read alone: %v)", ch.sql, *rec, alone)
		}
	}
}

// TestIdentityWithoutGenerationRow: with the generation's row deleted (by hand: no master
// does), every request reads its caller afresh and sees each change, and nothing is kept.
func TestIdentityWithoutGenerationRow(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	alice, vision := fixture(t, st, "alice", "vision")
	j := createJob(t, st, alice, vision, job.StatusFinished)
	if err := st.RecordCertificate(ctx, "a1", "user", alice.URN, time.Now().Add(time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	readCaller(t, st, alice.URN, "a1", j.UUID)
	if _, err := st.DB().ExecContext(ctx, `DELETE FROM identity_generation`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if c, hit := readCaller(t, st, alice.URN, "a1", j.UUID); hit || c.certState != "valid" || c.user.ID != alice.ID {
			t.Fatalf("without the generation: %+v (kept: %v)", c, hit)
		}
	}
	if _, err := st.RevokeCertificate(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	if c, hit := readCaller(t, st, alice.URN, "a1", j.UUID); hit || c.certState != "revoked" {
		t.Fatalf("without the generation, after a revocation: %+v (kept: %v)", c, hit)
	}
	before := st.JobsReadAlone()
	readCaller(t, st, alice.URN, "a1", j.UUID)
	if st.JobsReadAlone() != before {
		t.Fatal("a job was read without its owner's row, though no generation vouched for the names")
	}
}

// TestIdentityReadsEveryField: the caller read by a request (scanned by hand, in the statement's
// column order) is the user GetUserByURN reads, every field set to something other than its
// zero value, and his projects those GetUserWithProjects reads.
func TestIdentityReadsEveryField(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	alice, vision := fixture(t, st, "alice", "vision")
	if _, err := st.DB().ExecContext(ctx, `UPDATE users SET email = 'alice@example.org', is_admin = TRUE,
		issuer = 'https://idp.example.org', subject = 'sub-alice', email_verified = TRUE WHERE id = $1`, alice.ID); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordCertificate(ctx, "a1", "user", alice.URN, time.Now().Add(time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	j := createJob(t, st, alice, vision, job.StatusFinished)
	want, err := st.GetUserByURN(ctx, alice.URN)
	if err != nil {
		t.Fatal(err)
	}
	if want.Issuer == "" || want.Subject == "" || want.Email == "" || !want.IsAdmin || !want.EmailVerified || want.CreatedAt.IsZero() {
		t.Fatalf("the fixture left a field at its zero value: %+v", want)
	}
	_, wantProjects, err := st.GetUserWithProjects(ctx, alice.URN)
	if err != nil {
		t.Fatal(err)
	}
	for _, read := range []string{"first read", "kept"} {
		got, _ := readCaller(t, st, alice.URN, "a1", j.UUID)
		if !got.user.CreatedAt.Equal(want.CreatedAt) {
			t.Errorf("%s: created %v, want %v", read, got.user.CreatedAt, want.CreatedAt)
		}
		got.user.CreatedAt = want.CreatedAt
		if got.user != want || !slices.Equal(got.projects, wantProjects) || got.certState != "valid" {
			t.Errorf("%s: caller %+v %v %q, want %+v %v valid", read, got.user, got.projects, got.certState, want, wantProjects)
		}
	}
}
