package handlers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// The master's side of the slave protocol (package protocol documents the lifecycle). Every
// endpoint but Join needs a slave certificate; a user certificate gets 403, and so does a
// slave touching a job that is not assigned to it.

// maxProtocolBody bounds protocol requests (a log chunk is at most 1 MiB, base64-encoded).
const maxProtocolBody = 4 << 20

// HashToken is how join tokens are stored: only their SHA-256.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func requireSlave(r *http.Request) (*Caller, error) {
	c, err := requireSlaveUnchecked(r)
	if err == nil && c.CertToCheck != "" {
		// Only the calls of CertCheckedByHandler read the certificate's state themselves;
		// anywhere else this is a routing mistake, refused rather than served on an unchecked
		// certificate.
		return nil, fmt.Errorf("slave %s: certificate %s left unchecked before %s", c.SlaveName, c.CertToCheck, r.URL.Path)
	}
	return c, err
}

// CertCheckedByHandler says whether a slave's call to path reads the state of the slave's
// certificate in its own first statement (Caller.CertToCheck), where every other request's
// certificate is read before the handler in a statement of its own: the heartbeat (a
// thousand a second from 5,000 slaves), the long poll and the calls about a job (update, log,
// done). Those statements were a quarter of B8x's, each a wait for a connection under load.
// A refused certificate is still told so before anything about the request (certFirst).
func CertCheckedByHandler(path string) bool {
	switch path {
	case protocol.HeartbeatPath, protocol.NextPath, protocol.UpdatePath, protocol.LogPath, protocol.DonePath:
		return true
	}
	return false
}

// certFirst is err, or the 401 of the caller's certificate if it is recorded as revoked or
// expired: the way out of a call of CertCheckedByHandler before its first statement (a
// malformed body, a field refused), so that a refused certificate learns nothing else.
func (h *Handlers) certFirst(ctx context.Context, c *Caller, err error) error {
	if c.CertToCheck != "" {
		if cerr := CheckCertificate(ctx, h.store, c.CertToCheck); cerr != nil {
			return cerr
		}
	}
	return err
}

// certError is err, or the 401 it stands for when it is a certificate's refusal
// (*store.CertificateRefusedError).
func certError(err error) error {
	var refused *store.CertificateRefusedError
	if errors.As(err, &refused) {
		return CertificateRefused(refused.Serial, refused.State)
	}
	return err
}

// requireSlaveUnchecked is requireSlave for the calls of CertCheckedByHandler, which check the
// certificate in their own statement when the caller says so (Caller.CertToCheck).
func requireSlaveUnchecked(r *http.Request) (*Caller, error) {
	c := CallerFrom(r.Context())
	if c == nil {
		return nil, ErrUnauthenticated
	}
	if c.Kind != pki.KindSlave || c.SlaveName == "" {
		return nil, errorf(http.StatusForbidden, "%s credentials are not accepted on slave endpoints", c.Kind)
	}
	return c, nil
}

// decodeBody reads a protocol message strictly (unmarshalProtocol) and checks its fields
// (validate).
func decodeBody(w http.ResponseWriter, r *http.Request, v validator) error {
	buf := protocolBodies.Get().(*[]byte)
	body, err := readBodyInto(w, r, maxProtocolBody, *buf)
	if err == nil {
		err = unmarshalProtocol(body, v)
	}
	if cap(body) <= maxPooledProtocolBody {
		*buf = body[:0]
		protocolBodies.Put(buf)
	}
	if err != nil {
		return err
	}
	return v.validate()
}

// protocolBodies hold the slaves' messages while decodeBody decodes them: a heartbeat's body
// of a few kilobytes, read into a new buffer a thousand times a second, was 5 % of what B8x's
// master allocated (3 Dec). Nothing decoded keeps a reference into it: both JSON decoders copy
// what they take (goccy/go-json copies the whole input first), and the checks and errors copy
// what they quote.
var protocolBodies = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledProtocolBody is the largest body buffer kept for the next message (a log chunk may
// be megabytes; heartbeats and updates are a few kilobytes).
const maxPooledProtocolBody = 64 << 10

// SlaveJoin exchanges a one-time join token and a CSR for a slave certificate.
func (h *Handlers) SlaveJoin(w http.ResponseWriter, r *http.Request) error {
	var msg joinRequest
	if err := decodeBody(w, r, &msg); err != nil {
		return err
	}
	req := protocol.JoinRequest(msg)
	if h.cfg.CA == nil {
		return errorf(http.StatusServiceUnavailable, "this master cannot sign certificates")
	}
	ctx := r.Context()
	name, cluster, err := h.store.UseSlaveToken(ctx, HashToken(req.Token))
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusForbidden, "join token unknown, used or expired: make a new one with `gpulab-master slave-token`")
	} else if err != nil {
		return err
	}
	cert, err := h.cfg.CA.SignCSR([]byte(req.CSR), pki.ClientSpec{Kind: pki.KindSlave,
		URN: pki.URN{Authority: h.cfg.Authority, Type: "slave", Name: name}.String(), Name: name, Validity: h.cfg.SlaveCertValidity})
	if err != nil {
		return errorf(http.StatusBadRequest, "csr: %v", err)
	}
	// Recorded, so that an admin can list and revoke it (`gpulab-master cert revoke`).
	if err := h.store.RecordCertificate(ctx, cert.SerialNumber.String(), store.CertSlave, name, cert.NotAfter, ""); err != nil {
		return err
	}
	if err := h.store.JoinSlave(ctx, name, cluster); err != nil {
		return err
	}
	h.log.InfoContext(ctx, "slave joined", "slave", name, "cluster", cluster)
	writeJSON(w, http.StatusOK, protocol.JoinReply{Name: name, ClusterID: cluster, Certificate: string(pemCert(cert.Raw)), CA: string(h.cfg.CA.CertPEM)})
	return nil
}

// SlaveRegister records a slave's inventory at its start and reconciles at once: the new
// instance listed every container it has, so a job the master has on the slave past ASSIGNED
// without a container among them is gone (requeued if it never ran, ended if it did).
func (h *Handlers) SlaveRegister(w http.ResponseWriter, r *http.Request) error {
	c, err := requireSlave(r)
	if err != nil {
		return err
	}
	var msg inventory
	if err := decodeBody(w, r, &msg); err != nil {
		return err
	}
	inv := protocol.Inventory(msg)
	ctx := r.Context()
	known, err := h.store.GetSlave(ctx, c.SlaveName)
	if err != nil {
		return err
	}
	if inv.InstanceID == "" {
		return fieldError("instanceId", "is required")
	}
	inv.Name, inv.ClusterID = c.SlaveName, known.ClusterID // identity and cluster come from the certificate
	data, err := json.Marshal(inv)
	if err != nil {
		return fmt.Errorf("encode inventory: %w", err)
	}
	reg := store.SlaveRegistration{Name: c.SlaveName, InstanceID: inv.InstanceID, ClusterID: known.ClusterID,
		Host: inv.Host, DNSName: inv.DNSName, Version: inv.Version, Inventory: data}
	if e := inv.SSH; e != nil {
		reg.SSHHost, reg.SSHPort, reg.SSHHostKey = e.Host, e.Port, strings.TrimSpace(e.HostKey)
	}
	if _, err := h.store.RegisterSlave(ctx, reg); err != nil {
		return err
	}
	h.forgetCapacity()
	view, _, err := h.reconcile(ctx, c.SlaveName, inv.Containers, "slave "+c.SlaveName+" restarted and found no container of the job")
	if err != nil {
		return err
	}
	h.log.InfoContext(ctx, "slave registered", "slave", c.SlaveName, "instance", inv.InstanceID, "gpus", len(inv.GPUs), "gpu_status", inv.GPUStatus,
		"containers", len(inv.Containers), "jobs", len(view))
	h.wakeScheduler()
	writeJSON(w, http.StatusOK, protocol.Registration{HeartbeatInterval: h.heartbeatInterval(), Jobs: view, FenceAfter: h.cfg.FenceAfter})
	return nil
}

// SlaveHeartbeat records a heartbeat with the jobs' usage, reconciles what the slave holds with
// what the master has on it, and answers the master's view and stop orders.
func (h *Handlers) SlaveHeartbeat(w http.ResponseWriter, r *http.Request) error {
	c, err := requireSlaveUnchecked(r)
	if err != nil {
		return err
	}
	var msg heartbeat
	if err := decodeBody(w, r, &msg); err != nil {
		// A refused certificate is told so before anything about its body, as at every
		// other endpoint (this read happens only for a body that is refused anyway).
		return h.certFirst(r.Context(), c, err)
	}
	hb := protocol.Heartbeat(msg)
	ctx := r.Context()
	// Each sample stands for one heartbeat interval (the slave samples once per interval).
	every := h.cfg.HeartbeatInterval
	if every <= 0 {
		every = 5 * time.Second // the slaves' own default when the master names none
	}
	// One statement checks the certificate (when the middleware left it to the heartbeat),
	// records the heartbeat and its samples and reads what reconciling needs (shared with the
	// other slaves' heartbeats that wait for the database at the same time): more follow only
	// when there is something to fix.
	beat, err := h.store.Heartbeat(ctx, store.Beat{Slave: c.SlaveName, InstanceID: hb.InstanceID, CertSerial: c.CertToCheck, Usage: gpuReport(hb.Jobs),
		Samples: usageSamples(hb.Jobs), SampleSecs: every.Seconds(), MissingGrace: h.cfg.MissingGrace})
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusConflict, "slave %s instance %s is not registered: register again", c.SlaveName, hb.InstanceID)
	} else if err != nil {
		return certError(err)
	}
	view, stops, err := h.reconcileWith(ctx, c.SlaveName, hb.Jobs, "", beat.Jobs, beat.Releases)
	if err != nil {
		return err
	}
	if beat.CameOnline {
		// Its resources count again. Any other heartbeat changes nothing a pass looks at unless
		// reconcile freed something (it wakes the scheduler then), and waking the scheduler at
		// every one kept it busy on a large cluster (500 slaves every 5 s: passes back to back,
		// bench/ B8); the loop's timer covers the rest.
		h.wakeScheduler()
	}
	writeJSON(w, http.StatusOK, protocol.HeartbeatReply{Interval: h.heartbeatInterval(), Stops: stops, Jobs: view, FenceAfter: h.cfg.FenceAfter})
	return nil
}

// heartbeatInterval is the interval told to a slave in one reply: HeartbeatInterval spread by
// HeartbeatJitter.
func (h *Handlers) heartbeatInterval() time.Duration {
	return jitteredInterval(h.cfg.HeartbeatInterval, h.cfg.HeartbeatJitter, rand.Float64())
}

// jitteredInterval is d moved by frac×(2u−1) of itself (u uniform in [0, 1): anywhere within
// ±frac of d), to the millisecond.
//
// Why the spread: a slave times its next heartbeat from the master's reply, and the master
// answers the heartbeats that wait for the database at the same moment together, in one
// statement (store.Heartbeat). Slaves answered together send together an interval later and
// are recorded together again, while a group meeting another merges with it: with an exact
// interval the groups only grow, and a fleet that began spread out ends up sending in bursts
// (the synchronisation of periodic messages, Floyd and Jacobson 1994). B8x's soaks at 2,000
// slaves showed it: the heartbeats a statement recorded rose from 1.4 to 2.2–2.3 over half
// an hour; with the spread they stay at 1.0–1.1, and the heartbeats sent in a 100-ms slot
// vary as independent ones do (bench/RESULTS.md, 30 Nov). A group is held together only to
// within a statement's time (about a millisecond); ±10 % of 5 s breaks it apart at its next
// beat. The mean stays d, so the usage accounting (a sample per interval) is unbiased.
func jitteredInterval(d time.Duration, frac, u float64) time.Duration {
	if frac <= 0 || d <= 0 {
		return d
	}
	j := time.Duration(float64(d) * (1 + frac*(2*u-1)))
	return max(j.Round(time.Millisecond), time.Millisecond)
}

// CheckCertificate refuses (401) a certificate the master recorded as revoked or expired. One
// the master has no record of (issued before certificates were recorded) is left to the TLS
// stack's checks of signature and expiry.
func CheckCertificate(ctx context.Context, st *store.Store, serial string) error {
	if err := st.CheckCertificate(ctx, serial); err != nil {
		var refused *store.CertificateRefusedError
		if errors.As(err, &refused) {
			return certError(err)
		}
		return fmt.Errorf("check certificate %s: %w", serial, err)
	}
	return nil
}

// CertificateRefused is the 401 of a certificate recorded as revoked or expired (state), nil
// for any other state.
func CertificateRefused(serial, state string) error {
	switch state {
	case "revoked":
		return &Error{Status: http.StatusUnauthorized, Message: "client certificate " + serial + " is revoked"}
	case "expired":
		return &Error{Status: http.StatusUnauthorized, Message: "client certificate " + serial + " has expired"}
	}
	return nil
}

// reconcile compares what a slave holds with what the master has on it, and fixes the
// difference, each fix with an event on the job:
//   - what ended jobs held on the slave is freed once the slave no longer lists them;
//   - a job the master has on the slave past ASSIGNED that the slave does not hold (in that
//     attempt) is requeued if it never ran, ended if it did: at once when gone is set (a
//     registration lists every container), else once the slave's heartbeats have not listed it
//     for the missing grace (a heartbeat taken just before a task began may miss it);
//   - an ASSIGNED or STARTING job the slave lists has its lease renewed when it is due
//     (store.SlaveJob.Renew: its STARTING update on the way; a pull in progress).
//
// It returns the master's view of the jobs on the slave and the stop orders for what the slave
// holds and must not.
func (h *Handlers) reconcile(ctx context.Context, slave string, held []protocol.RunningJob, gone string) ([]protocol.JobState, []protocol.StopOrder, error) {
	live, err := h.store.ListSlaveJobs(ctx, slave, h.cfg.MissingGrace)
	if err != nil {
		return nil, nil, err
	}
	releases, err := h.store.ListReleases(ctx, slave)
	if err != nil {
		return nil, nil, err
	}
	return h.reconcileWith(ctx, slave, held, gone, live, releases)
}

// reconcileWith is reconcile given the slave's live jobs and releases as read (a heartbeat
// reads them in its own statement).
func (h *Handlers) reconcileWith(ctx context.Context, slave string, held []protocol.RunningJob, gone string,
	live []store.SlaveJob, releases []store.Release) ([]protocol.JobState, []protocol.StopOrder, error) {
	stops, err := h.stopOrders(ctx, slave, held, live)
	if err != nil {
		return nil, nil, err
	}
	holds := heldSet(held)
	var freed []string
	for _, rl := range releases {
		if _, ok := holds[rl.JobUUID]; !ok {
			freed = append(freed, rl.JobUUID)
		}
	}
	if _, err := h.store.ConfirmReleases(ctx, slave, freed, "slave "+slave+" confirmed the container gone: its resources are free"); err != nil {
		return nil, nil, err
	}
	changed := len(freed) > 0
	view := make([]protocol.JobState, 0, len(live))
	var missing, listed, taking []string
	for _, j := range live {
		hj, ok := holds[j.UUID]
		switch {
		case ok && hj.Attempt == j.Attempt:
			if j.MissingSince.Valid {
				listed = append(listed, j.UUID) // listed again: no longer missing
			}
			if j.Renew && hj.Status != "" {
				taking = append(taking, j.UUID)
			}
		case j.Status == job.StatusAssigned:
			// Not taken yet: the assignment's lease covers it.
		case gone != "" || j.Missing:
			why := gone
			if why == "" {
				why = fmt.Sprintf("slave %s has not listed the job for %s: its container is gone", slave, h.cfg.MissingGrace)
			}
			if err := h.lostOnSlave(ctx, slave, j, why); err != nil {
				return nil, nil, err
			}
			changed = true
			continue
		default:
			missing = append(missing, j.UUID)
		}
		view = append(view, protocol.JobState{JobUUID: j.UUID, Status: j.Status, Attempt: j.Attempt})
	}
	if err := h.store.MarkMissing(ctx, slave, missing, listed); err != nil {
		return nil, nil, err
	}
	if err := h.store.RenewLeases(ctx, slave, taking); err != nil {
		return nil, nil, err
	}
	if changed {
		h.wakeScheduler()
	}
	return view, stops, nil
}

// lostOnSlave gives its outcome to a job whose container the slave confirms it does not have:
// one that never got to run is queued again, one that ran fails (and is restarted if
// restartable, as after a lost worker). The slave has no container of the attempt, so what
// the job held is free at once.
func (h *Handlers) lostOnSlave(ctx context.Context, slave string, j store.SlaveJob, why string) error {
	ch := store.Change{From: []job.Status{j.Status}, Attempt: store.Attempt(j.Attempt), Released: true,
		Event: store.Event{Actor: "master", Message: why}}
	if j.Status == job.StatusStarting {
		ch.To, ch.Event.Message = job.StatusQueued, why+"; the job never ran and is queued again"
	} else {
		ch.To, ch.Restart = job.StatusFailed, true
	}
	_, restart, err := h.store.ChangeJob(ctx, j.UUID, ch)
	if errors.Is(err, store.ErrStateConflict) {
		return nil // it moved meanwhile (the slave's own report won)
	}
	if err != nil {
		return err
	}
	h.log.WarnContext(ctx, "job lost on its slave", "job", j.UUID, "slave", slave, "status", j.Status, "now", ch.To, "restart_job", restart, "why", why)
	return nil
}

// stopOrders computes the stop orders for what a slave holds and must not, given the jobs the
// master has on it (live): jobs the master ended, gave to another attempt or another slave,
// or does not know, and jobs that must halt. It writes nothing (a long poll runs it every few
// seconds), and reads only when the slave holds jobs the master does not have on it.
func (h *Handlers) stopOrders(ctx context.Context, slave string, held []protocol.RunningJob, live []store.SlaveJob) ([]protocol.StopOrder, error) {
	stops := []protocol.StopOrder{}
	if len(held) == 0 {
		return stops, nil
	}
	onSlave := make(map[string]store.SlaveJob, len(live))
	for _, j := range live {
		onSlave[j.UUID] = j
	}
	var unknown []string
	for _, hj := range held {
		if _, ok := onSlave[hj.JobUUID]; !ok {
			unknown = append(unknown, hj.JobUUID)
		}
	}
	others, err := h.store.JobStatuses(ctx, slave, unknown)
	if err != nil {
		return nil, err
	}
	for _, hj := range held {
		j, ok := onSlave[hj.JobUUID]
		switch {
		case ok && j.Attempt != hj.Attempt:
			stops = append(stops, protocol.StopOrder{JobUUID: hj.JobUUID, Mode: protocol.StopCancel,
				Reason: fmt.Sprintf("the job was placed again (attempt %d, not %d)", j.Attempt, hj.Attempt)})
		case ok && j.Status == job.StatusMustHalt:
			stops = append(stops, protocol.StopOrder{JobUUID: hj.JobUUID, Mode: protocol.StopHalt, Reason: "job must halt"})
		case ok:
		default:
			o, known := others[hj.JobUUID]
			reason := "the master has no such job"
			switch {
			case known && o.Status.Ended():
				reason = "job is " + string(o.Status)
			case known:
				reason = "job is not on this slave (it is " + string(o.Status) + ")"
			}
			stops = append(stops, protocol.StopOrder{JobUUID: hj.JobUUID, Mode: protocol.StopCancel, Reason: reason})
		}
	}
	return stops, nil
}

func heldSet(held []protocol.RunningJob) map[string]protocol.RunningJob {
	out := make(map[string]protocol.RunningJob, len(held))
	for _, hj := range held {
		// A task and a container of the same job: the task (it has a status) tells more.
		if old, ok := out[hj.JobUUID]; ok && old.Status != "" {
			continue
		}
		out[hj.JobUUID] = hj
	}
	return out
}

// SlaveNext answers with work for the slave: jobs assigned to it that it does not hold yet,
// and stop orders; it waits (long poll) up to the asked time when there is none.
func (h *Handlers) SlaveNext(w http.ResponseWriter, r *http.Request) error {
	c, err := requireSlaveUnchecked(r)
	if err != nil {
		return err
	}
	var msg nextRequest
	if err := decodeBody(w, r, &msg); err != nil {
		return h.certFirst(r.Context(), c, err)
	}
	req := protocol.NextRequest(msg)
	wait := min(max(req.Wait, 0), h.cfg.MaxLongPoll)
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	// A master is woken for its own scheduler's assignments and, through Postgres
	// notifications, for other masters' (store.Listen); a recheck, when configured, is only
	// the safety net of a lost notification (Config.WorkRecheck).
	var recheck <-chan time.Time
	if h.cfg.WorkRecheck > 0 {
		poll := time.NewTicker(h.cfg.WorkRecheck)
		defer poll.Stop()
		recheck = poll.C
	}
	cert := c.CertToCheck // read at the first look only: the poll was let in then
	for {
		woken := h.work.For(c.SlaveName)
		work, err := h.pendingWork(r.Context(), c.SlaveName, req, cert)
		if err != nil {
			return err
		}
		cert = ""
		if len(work.Assignments) > 0 || len(work.Stops) > 0 {
			writeJSON(w, http.StatusOK, work)
			return nil
		}
		select {
		case <-ctx.Done():
			writeJSON(w, http.StatusOK, work)
			return nil
		case <-woken:
		case <-recheck:
		}
	}
}

// pendingWork computes the work for a slave now; with cert set (the slave's certificate) it
// refuses one recorded as revoked or expired before anything else (store.SlaveWork).
func (h *Handlers) pendingWork(ctx context.Context, slave string, req protocol.NextRequest, cert string) (protocol.Work, error) {
	work := protocol.Work{Assignments: []protocol.Assignment{}}
	// One round trip each time a poll wakes (5,000 slaves poll 200 times a second).
	disabled, live, err := h.store.SlaveWork(ctx, slave, h.cfg.MissingGrace, cert)
	if err != nil {
		return work, certError(err)
	}
	if work.Stops, err = h.stopOrders(ctx, slave, req.Jobs, live); err != nil {
		return work, err
	}
	// A disabled slave gets no job, so none of a job's secrets (image credentials,
	// environment): a stolen slave certificate learns nothing more once its slave is disabled.
	if disabled {
		return work, nil
	}
	holds := heldSet(req.Jobs)
	var offer []string
	for _, j := range live {
		if _, taken := holds[j.UUID]; j.Status == job.StatusAssigned && !taken {
			offer = append(offer, j.UUID)
		}
	}
	// One statement reads them all and starts their assigned lease (store.Leases): the work
	// is handed over. Should the answer not reach the slave, its next poll offers them again.
	handed, err := h.store.HandOver(ctx, slave, offer)
	if err != nil {
		return work, err
	}
	for i, j := range live {
		hj := handed[j.UUID]
		if hj == nil || hj.Job.State.Status != job.StatusAssigned {
			continue // not to offer, or moved (or gone) since the list
		}
		if hj.Job.State.Scheduling.AssignedInstanceID != req.InstanceID {
			// Assigned to an earlier instance of this slave: offered again, the slave is the same machine.
			h.log.DebugContext(ctx, "offering a job assigned to an earlier instance", "job", hj.Job.UUID, "slave", slave)
		}
		a, err := assignment(hj.JobRecord, i)
		if err != nil {
			return work, err
		}
		// Placed again: its log goes on after what the earlier attempts wrote.
		a.Log.NextSeq, a.Log.Size = hj.LogNextSeq, hj.LogSize
		work.Assignments = append(work.Assignments, a)
	}
	return work, nil
}

// assignment builds what a slave needs to run a job.
func assignment(rec *store.JobRecord, workerID int) (protocol.Assignment, error) {
	j := rec.Job
	a := protocol.Assignment{Job: *j, Attempt: rec.Attempt, UserName: rec.UserName, UserURN: j.Owner.UserURN, Project: rec.ProjectName,
		ProjectGID: rec.ProjectGID, ClusterID: j.State.Scheduling.AssignedClusterID, WorkerID: workerID, GPUs: []protocol.GPU{}}
	if u, err := pki.ParseURN(j.Owner.UserURN); err == nil {
		a.UserMiniID = u.MiniID()
	}
	if res := j.State.Resources; res != nil {
		a.CPUIDs, a.MemoryGb = res.CPUIDs, res.CPUMemoryGb
		if len(res.GPUDetails) > 0 {
			if err := json.Unmarshal(res.GPUDetails, &a.GPUs); err != nil {
				return a, fmt.Errorf("decode GPUs of job %s: %w", j.UUID, err)
			}
		}
	}
	return a, nil
}

// conflictError is the 409 of a slave call about a job that is not (or no longer) the slave's
// in the attempt it names: the body tells the state the master holds, and the slave acts on it.
// The state of a job on another slave is not told.
type conflictError struct{ protocol.Conflict }

func (e *conflictError) Error() string { return e.Message }

func writeConflict(w http.ResponseWriter, c protocol.Conflict) {
	writeJSON(w, http.StatusConflict, c)
}

// slaveJob reads where a job is and checks it is on the calling slave (store.SlaveMayAct,
// wrongSlave). It reads only the job's place and state (store.JobPlace), not the whole job.
//
// For a call of CertCheckedByHandler it checks the caller's certificate first: in JobPlace's
// statement, or in one of its own when the uuid is refused before.
func (h *Handlers) slaveJob(ctx context.Context, c *Caller, id string) (store.JobPlace, error) {
	if err := h.jobUUID(ctx, c, id); err != nil {
		return store.JobPlace{}, err
	}
	p, err := h.store.JobPlace(ctx, id, c.CertToCheck)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return p, certError(err)
	}
	var wrong *store.WrongSlaveError
	if errors.As(store.SlaveMayAct(c.SlaveName, id, p, err == nil), &wrong) {
		return store.JobPlace{}, wrongSlave(wrong)
	}
	return p, nil
}

// jobUUID refuses a job uuid that is not one, after the caller's certificate (certFirst).
func (h *Handlers) jobUUID(ctx context.Context, c *Caller, id string) error {
	if _, err := uuid.Parse(id); err != nil {
		return h.certFirst(ctx, c, fieldError("jobUuid", "is not a job uuid"))
	}
	return nil
}

// wrongSlave is the 409 of a slave's call about a job that is not its to act on: another
// slave's job (or one placed again and not yet given out) is a conflict without its state,
// worded exactly as for a job that does not exist, so a slave certificate cannot probe other
// slaves' jobs. A disabled slave takes no job: one a scheduler pass assigned to it just before
// it was disabled stays untaken (its lease queues it again), though the slave learns its uuid
// from its heartbeat's view; it may neither start it nor log into it nor end it, and is told
// the job's state.
func wrongSlave(e *store.WrongSlaveError) error {
	c := protocol.Conflict{JobUUID: e.JobUUID, Message: e.Error()}
	if e.Disabled() {
		c.Status, c.Attempt = e.Place.Status, e.Place.Attempt
	}
	return &conflictError{c}
}

// slaveChange makes a slave's state change and answers it: a change already made (a retry after
// a lost reply) is a success with the job's state, a real conflict a 409 with the state the
// master holds. The job's place is checked (store.SlaveMayAct) and the caller's certificate read
// in the change's own statement (store.SlaveChangeJob): one statement for the call where
// there were two. It returns the place the job left (for a success).
func (h *Handlers) slaveChange(w http.ResponseWriter, r *http.Request, c *Caller, id string, ch store.Change) (store.JobPlace, error) {
	ctx := r.Context()
	if err := h.jobUUID(ctx, c, id); err != nil {
		return store.JobPlace{}, err
	}
	ch.WakeScheduler = ch.To.Ended() // the other masters' leader learns it from the change itself
	ch.Slave, ch.CertSerial = c.SlaveName, c.CertToCheck
	place, restart, err := h.store.SlaveChangeJob(ctx, id, ch)
	var sc *store.StateConflict
	var wrong *store.WrongSlaveError
	switch {
	case errors.As(err, &wrong):
		return store.JobPlace{}, wrongSlave(wrong)
	case errors.As(err, &sc) && sc.Current == ch.To && sc.Attempt == *ch.Attempt:
		h.log.InfoContext(ctx, "slave repeated a state change already made", "job", id, "slave", c.SlaveName, "status", ch.To)
	case errors.As(err, &sc):
		if ch.Released && sc.Attempt == *ch.Attempt {
			// The master ended the job first; the slave's report still says the container
			// exited, which frees what the job held.
			if _, err := h.store.ConfirmReleases(ctx, c.SlaveName, []string{id}, "slave "+c.SlaveName+" reported the container exited: its resources are free"); err != nil {
				return store.JobPlace{}, err
			}
			h.wakeScheduler()
		}
		writeConflict(w, protocol.Conflict{JobUUID: id, Status: sc.Current, Attempt: sc.Attempt, Message: sc.Error()})
		return store.JobPlace{}, nil
	case err != nil:
		return store.JobPlace{}, certError(err)
	default:
		if ch.To.Ended() {
			log := h.log.With("job", id, "status", ch.To, "slave", c.SlaveName, "restart_job", restart)
			if ch.ExitCode != nil {
				log = log.With("exit_code", *ch.ExitCode)
			}
			log.InfoContext(ctx, "job ended")
			h.sched.Wake() // this master's; the change notified every master's
		}
	}
	writeJSON(w, http.StatusOK, protocol.JobState{JobUUID: id, Status: ch.To, Attempt: *ch.Attempt})
	return place, nil
}

// SlaveUpdate is a conditional state change by a slave (ASSIGNED→STARTING→RUNNING,
// MUSTHALT→HALTING), optionally with the resources it really got (published ports).
func (h *Handlers) SlaveUpdate(w http.ResponseWriter, r *http.Request) error {
	c, err := requireSlaveUnchecked(r)
	if err != nil {
		return err
	}
	var msg stateUpdate
	if err := decodeBody(w, r, &msg); err != nil {
		return h.certFirst(r.Context(), c, err)
	}
	u := protocol.StateUpdate(msg)
	if ok, why := job.CanTransition(u.From, u.To, job.ActorSlave); !ok || u.To.Ended() {
		if why == "" {
			why = "use done to end a job"
		}
		return h.certFirst(r.Context(), c, fieldError("to", "%s", why))
	}
	place, err := h.slaveChange(w, r, c, u.JobUUID, store.Change{From: []job.Status{u.From}, To: u.To, Attempt: store.Attempt(u.Attempt),
		Resources: u.Resources, Event: store.Event{Actor: "slave " + c.SlaveName, Message: u.Reason}})
	if err == nil && u.To == job.StatusRunning { // a retry's place is empty: observed once
		h.observeQueueWait(place)
	}
	return err
}

// observeQueueWait records, for a job that now runs, the time since it was (last) queued.
func (h *Handlers) observeQueueWait(p store.JobPlace) {
	if p.QueuedAt.Valid {
		h.cfg.Metrics.ObserveQueueWait(p.ClusterID, time.Since(p.QueuedAt.Time))
	}
}

// SlaveLog appends a chunk of a job's log. Chunks are accepted after the job ended too (the
// tail of a cancelled job's output still arrives), but only from the job's current attempt.
func (h *Handlers) SlaveLog(w http.ResponseWriter, r *http.Request) error {
	c, err := requireSlaveUnchecked(r)
	if err != nil {
		return err
	}
	var msg logChunk
	if err := decodeBody(w, r, &msg); err != nil {
		return h.certFirst(r.Context(), c, err)
	}
	chunk := protocol.LogChunk(msg)
	ctx := r.Context()
	if err := h.jobUUID(ctx, c, chunk.JobUUID); err != nil {
		return err
	}
	// One statement checks the job is the slave's, in the chunk's attempt, and appends it.
	place, err := h.store.AppendLog(ctx, store.LogChunk{JobUUID: chunk.JobUUID, Seq: chunk.Seq, Data: chunk.Data, Limit: h.cfg.MaxJobLog,
		Slave: c.SlaveName, Attempt: chunk.Attempt, CertSerial: c.CertToCheck})
	var wrong *store.WrongSlaveError
	switch {
	case errors.As(err, &wrong):
		return wrongSlave(wrong)
	case errors.Is(err, store.ErrOtherAttempt):
		return &conflictError{protocol.Conflict{JobUUID: chunk.JobUUID, Status: place.Status, Attempt: place.Attempt,
			Message: fmt.Sprintf("log of attempt %d refused: the job is at attempt %d", chunk.Attempt, place.Attempt)}}
	case errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrLogGap):
		return errorf(http.StatusConflict, "%v", err)
	case err != nil:
		return certError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// SlaveLogState tells a slave how much of a job's log the master has.
func (h *Handlers) SlaveLogState(w http.ResponseWriter, r *http.Request) error {
	c, err := requireSlave(r)
	if err != nil {
		return err
	}
	var req logStateQuery
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	ctx := r.Context()
	if _, err := h.slaveJob(ctx, c, req.JobUUID); err != nil {
		return err
	}
	next, size, err := h.store.JobLogState(ctx, req.JobUUID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, protocol.LogState{NextSeq: next, Size: size})
	return nil
}

// SlaveDone ends a job: FINISHED, FAILED or HALTED, with exit code and usage; a halted
// restartable job (or one its slave stopped when fencing itself) gets its restart job in the
// same transaction. The container has exited, so what the job held is free at once.
func (h *Handlers) SlaveDone(w http.ResponseWriter, r *http.Request) error {
	c, err := requireSlaveUnchecked(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	var in completion
	if err := decodeBody(w, r, &in); err != nil {
		return h.certFirst(ctx, c, err)
	}
	d := protocol.Completion(in)
	if !slices.Contains([]job.Status{job.StatusFinished, job.StatusFailed, job.StatusHalted}, d.To) {
		return h.certFirst(ctx, c, fieldError("to", "must be FINISHED, FAILED or HALTED, not %s", d.To))
	}
	if ok, why := job.CanTransition(d.From, d.To, job.ActorSlave); !ok {
		return h.certFirst(ctx, c, fieldError("to", "%s", why))
	}
	var usage json.RawMessage
	if d.Usage != nil {
		usage, _ = json.Marshal(d.Usage)
	}
	msg := d.Reason
	if d.ExitCode != nil {
		msg = fmt.Sprintf("exit code %d", *d.ExitCode)
		if d.Reason != "" {
			msg += ": " + d.Reason
		}
	}
	_, err = h.slaveChange(w, r, c, d.JobUUID, store.Change{From: []job.Status{d.From}, To: d.To, Attempt: store.Attempt(d.Attempt), Released: true,
		Event: store.Event{Actor: "slave " + c.SlaveName, Message: msg}, ExitCode: d.ExitCode, Usage: usage,
		Restart: d.To == job.StatusHalted || d.Fenced})
	return err
}

// wakeScheduler wakes this master's scheduler loop and, through the database, the leader's
// wherever it runs: something it plans with changed (a job ended, resources freed, a slave
// came back).
func (h *Handlers) wakeScheduler() {
	h.sched.Wake()
	h.store.WakeScheduler()
}

// wakeSlaves wakes the long polls of slaves, here and on the other masters: they have work
// (a job to stop).
func (h *Handlers) wakeSlaves(ctx context.Context, names ...string) {
	h.work.WakeKeys(names...)
	if err := h.store.NotifySlaves(ctx, names...); err != nil {
		h.log.WarnContext(ctx, "could not notify slaves", "err", err)
	}
}

// usageSamples are the samples of a heartbeat's running jobs, for their usage series: one
// per job (the slave samples once per heartbeat interval).
func usageSamples(jobs []protocol.RunningJob) []store.UsageSample {
	var out []store.UsageSample
	for _, j := range jobs {
		if j.Usage == nil || j.Status != job.StatusRunning {
			continue
		}
		if out == nil {
			out = make([]store.UsageSample, 0, len(jobs)) // sized once: a heartbeat a millisecond
		}
		u := store.UsageSample{JobUUID: j.JobUUID, CPUPercent: j.Usage.CPUPercent, MemoryMiB: j.Usage.MemoryMiB}
		if len(j.Usage.GPUs) > 0 {
			u.GPUs = make([]store.GPUSample, 0, len(j.Usage.GPUs))
		}
		for _, g := range j.Usage.GPUs {
			u.GPUs = append(u.GPUs, store.GPUSample{Index: g.Index, UtilPercent: g.UtilPercent, MemoryUsedMiB: g.MemoryUsedMiB})
		}
		out = append(out, u)
	}
	return out
}
