package handlers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

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

// endedJobMemory is how long a slave keeps being told about jobs that ended, so one back from
// an outage removes their containers.
const endedJobMemory = 24 * time.Hour

// HashToken is how join tokens are stored: only their SHA-256.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func requireSlave(r *http.Request) (*Caller, error) {
	c := CallerFrom(r.Context())
	if c == nil {
		return nil, ErrUnauthenticated
	}
	if c.Kind != pki.KindSlave || c.SlaveName == "" {
		return nil, errorf(http.StatusForbidden, "%s credentials are not accepted on slave endpoints", c.Kind)
	}
	return c, nil
}

func decodeBody(r *http.Request, v any) error {
	body, err := readBody(r, maxProtocolBody)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return errorf(http.StatusBadRequest, "invalid protocol message: %v", err)
	}
	return nil
}

// SlaveJoin exchanges a one-time join token and a CSR for a slave certificate.
func (h *Handlers) SlaveJoin(w http.ResponseWriter, r *http.Request) error {
	var req protocol.JoinRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
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
		URN: pki.URN{Authority: h.cfg.Authority, Type: "slave", Name: name}.String(), Name: name, Validity: 5 * 365 * 24 * time.Hour})
	if err != nil {
		return errorf(http.StatusBadRequest, "csr: %v", err)
	}
	if err := h.store.JoinSlave(ctx, name, cluster); err != nil {
		return err
	}
	h.log.InfoContext(ctx, "slave joined", "slave", name, "cluster", cluster)
	writeJSON(w, http.StatusOK, protocol.JoinReply{Name: name, ClusterID: cluster, Certificate: string(pemCert(cert.Raw)), CA: string(h.cfg.CA.CertPEM)})
	return nil
}

// SlaveRegister records a slave's inventory at its start.
func (h *Handlers) SlaveRegister(w http.ResponseWriter, r *http.Request) error {
	c, err := requireSlave(r)
	if err != nil {
		return err
	}
	var inv protocol.Inventory
	if err := decodeBody(r, &inv); err != nil {
		return err
	}
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
	if _, err := h.store.RegisterSlave(ctx, store.SlaveRegistration{Name: c.SlaveName, InstanceID: inv.InstanceID, ClusterID: known.ClusterID,
		Host: inv.Host, DNSName: inv.DNSName, Version: inv.Version, Inventory: data}); err != nil {
		return err
	}
	jobs, err := h.store.ListSlaveJobs(ctx, c.SlaveName, endedJobMemory)
	if err != nil {
		return err
	}
	reg := protocol.Registration{HeartbeatInterval: h.cfg.HeartbeatInterval, Jobs: []protocol.JobState{}}
	for _, j := range jobs {
		reg.Jobs = append(reg.Jobs, protocol.JobState{JobUUID: j.UUID, Status: job.Status(j.Status)})
	}
	h.log.InfoContext(ctx, "slave registered", "slave", c.SlaveName, "instance", inv.InstanceID, "gpus", len(inv.GPUs), "gpu_status", inv.GPUStatus, "reattached", len(inv.RunningJobs))
	h.sched.Wake()
	writeJSON(w, http.StatusOK, reg)
	return nil
}

// stopOrders says which of the jobs a slave runs must stop: those the master has ended (or
// never gave it), and those that must halt.
func (h *Handlers) stopOrders(ctx context.Context, slave string, running []string) ([]protocol.StopOrder, error) {
	stops := []protocol.StopOrder{}
	if len(running) == 0 {
		return stops, nil
	}
	statuses, err := h.store.JobStatuses(ctx, running)
	if err != nil {
		return nil, err
	}
	slaveJobs, err := h.store.ListSlaveJobs(ctx, slave, endedJobMemory)
	if err != nil {
		return nil, err
	}
	mine := map[string]bool{}
	for _, j := range slaveJobs {
		mine[j.UUID] = true
	}
	for _, id := range running {
		st, ok := statuses[id]
		switch {
		case !ok:
			stops = append(stops, protocol.StopOrder{JobUUID: id, Mode: protocol.StopCancel, Reason: "the master has no such job"})
		case !mine[id]:
			stops = append(stops, protocol.StopOrder{JobUUID: id, Mode: protocol.StopCancel, Reason: "job is not assigned to this slave"})
		case st.Ended():
			stops = append(stops, protocol.StopOrder{JobUUID: id, Mode: protocol.StopCancel, Reason: "job is " + string(st)})
		case st == job.StatusMustHalt:
			stops = append(stops, protocol.StopOrder{JobUUID: id, Mode: protocol.StopHalt, Reason: "job must halt"})
		}
	}
	return stops, nil
}

// SlaveHeartbeat records a heartbeat with the jobs' usage and answers stop orders.
func (h *Handlers) SlaveHeartbeat(w http.ResponseWriter, r *http.Request) error {
	c, err := requireSlave(r)
	if err != nil {
		return err
	}
	var hb protocol.Heartbeat
	if err := decodeBody(r, &hb); err != nil {
		return err
	}
	ctx := r.Context()
	usage, _ := json.Marshal(hb.Jobs)
	cameOnline, err := h.store.SlaveHeartbeat(ctx, c.SlaveName, hb.InstanceID, usage)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusConflict, "slave %s instance %s is not registered: register again", c.SlaveName, hb.InstanceID)
	} else if err != nil {
		return err
	}
	running := make([]string, 0, len(hb.Jobs))
	for _, j := range hb.Jobs {
		running = append(running, j.JobUUID)
		if j.Usage != nil {
			u, _ := json.Marshal(j.Usage)
			if err := h.store.SetJobUsage(ctx, j.JobUUID, u); err != nil {
				return err
			}
		}
	}
	stops, err := h.stopOrders(ctx, c.SlaveName, running)
	if err != nil {
		return err
	}
	if cameOnline {
		// Its resources count again. Any other heartbeat changes nothing a pass looks at, and
		// waking the scheduler at every one kept it busy on a large cluster (500 slaves every
		// 5 s: passes back to back, bench/ B8); the loop's timer covers the rest.
		h.sched.Wake()
	}
	writeJSON(w, http.StatusOK, protocol.HeartbeatReply{Interval: h.cfg.HeartbeatInterval, Stops: stops})
	return nil
}

// otherMastersPoll is how often a waiting long poll looks for work that another master's
// scheduler assigned. Each look is a few queries per waiting slave, so it is not every second.
const otherMastersPoll = 3 * time.Second

// SlaveNext answers with work for the slave: jobs assigned to it that it does not run yet, and
// stop orders; it waits (long poll) up to the asked time when there is none.
func (h *Handlers) SlaveNext(w http.ResponseWriter, r *http.Request) error {
	c, err := requireSlave(r)
	if err != nil {
		return err
	}
	var req protocol.NextRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	wait := min(max(req.Wait, 0), h.cfg.MaxLongPoll)
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	// This master's scheduler wakes the slave when it assigns to it or halts there; another
	// master's (several may share the database) is noticed by looking again now and then.
	poll := time.NewTicker(otherMastersPoll)
	defer poll.Stop()
	for {
		woken := h.work.For(c.SlaveName)
		work, err := h.pendingWork(r.Context(), c.SlaveName, req)
		if err != nil {
			return err
		}
		if len(work.Assignments) > 0 || len(work.Stops) > 0 {
			writeJSON(w, http.StatusOK, work)
			return nil
		}
		select {
		case <-ctx.Done():
			writeJSON(w, http.StatusOK, work)
			return nil
		case <-woken:
		case <-poll.C:
		}
	}
}

// pendingWork computes the work for a slave now.
func (h *Handlers) pendingWork(ctx context.Context, slave string, req protocol.NextRequest) (protocol.Work, error) {
	work := protocol.Work{Assignments: []protocol.Assignment{}}
	stops, err := h.stopOrders(ctx, slave, req.Running)
	if err != nil {
		return work, err
	}
	work.Stops = stops
	recs, err := h.store.ListJobs(ctx, store.JobFilter{Statuses: job.RunningStatuses, AssignedSlaveName: slave, Sort: "created"})
	if err != nil {
		return work, err
	}
	for i, rec := range recs {
		if rec.Job.State.Status != job.StatusAssigned || slices.Contains(req.Running, rec.Job.UUID) {
			continue
		}
		if rec.Job.State.Scheduling.AssignedInstanceID != req.InstanceID {
			// Assigned to an earlier instance of this slave: offered again, the slave is the same machine.
			h.log.DebugContext(ctx, "offering a job assigned to an earlier instance", "job", rec.Job.UUID, "slave", slave)
		}
		a, err := assignment(rec, i)
		if err != nil {
			return work, err
		}
		work.Assignments = append(work.Assignments, a)
	}
	return work, nil
}

// assignment builds what a slave needs to run a job.
func assignment(rec *store.JobRecord, workerID int) (protocol.Assignment, error) {
	j := rec.Job
	a := protocol.Assignment{Job: *j, UserName: rec.UserName, UserURN: j.Owner.UserURN, Project: rec.ProjectName,
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

// slaveJob loads a job and checks it is assigned to the calling slave.
func (h *Handlers) slaveJob(ctx context.Context, c *Caller, id string) (*store.JobRecord, error) {
	rec, err := h.store.GetJob(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errorf(http.StatusNotFound, "no job %s", id)
	} else if err != nil {
		return nil, err
	}
	if rec.Job.State.Scheduling.AssignedSlaveName != c.SlaveName {
		return nil, errorf(http.StatusForbidden, "job %s is not assigned to slave %s", id, c.SlaveName)
	}
	return rec, nil
}

// SlaveUpdate is a conditional state change by a slave (ASSIGNED→STARTING→RUNNING,
// MUSTHALT→HALTING), optionally with the resources it really got (published ports).
func (h *Handlers) SlaveUpdate(w http.ResponseWriter, r *http.Request) error {
	c, err := requireSlave(r)
	if err != nil {
		return err
	}
	var u protocol.StateUpdate
	if err := decodeBody(r, &u); err != nil {
		return err
	}
	ctx := r.Context()
	rec, err := h.slaveJob(ctx, c, u.JobUUID)
	if err != nil {
		return err
	}
	if ok, why := job.CanTransition(u.From, u.To, job.ActorSlave); !ok {
		return errorf(http.StatusConflict, "%s", why)
	}
	err = h.store.WithTx(ctx, func(tx *store.Store) error {
		if _, err := tx.TransitionJob(ctx, rec.Job.UUID, []job.Status{u.From}, u.To,
			store.Event{Actor: "slave " + c.SlaveName, Message: u.Reason}); err != nil {
			return err
		}
		if u.Resources != nil {
			return tx.UpdateJobResources(ctx, rec.Job.UUID, u.Resources)
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// SlaveLog appends a chunk of a job's log. Chunks are accepted after the job ended too (the
// tail of a cancelled job's output still arrives).
func (h *Handlers) SlaveLog(w http.ResponseWriter, r *http.Request) error {
	c, err := requireSlave(r)
	if err != nil {
		return err
	}
	var chunk protocol.LogChunk
	if err := decodeBody(r, &chunk); err != nil {
		return err
	}
	ctx := r.Context()
	if _, err := h.slaveJob(ctx, c, chunk.JobUUID); err != nil {
		return err
	}
	if err := h.store.AppendJobLog(ctx, chunk.JobUUID, chunk.Seq, chunk.Data); err != nil {
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrLogGap) {
			return errorf(http.StatusConflict, "%v", err)
		}
		return err
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
	var req struct {
		JobUUID string `json:"jobUuid"`
	}
	if err := decodeBody(r, &req); err != nil {
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
// restartable job gets its restart job in the same transaction.
func (h *Handlers) SlaveDone(w http.ResponseWriter, r *http.Request) error {
	c, err := requireSlave(r)
	if err != nil {
		return err
	}
	var d protocol.Completion
	if err := decodeBody(r, &d); err != nil {
		return err
	}
	ctx := r.Context()
	if _, err := h.slaveJob(ctx, c, d.JobUUID); err != nil {
		return err
	}
	if !slices.Contains([]job.Status{job.StatusFinished, job.StatusFailed, job.StatusHalted}, d.To) {
		return fieldError("to", "must be FINISHED, FAILED or HALTED, not %s", d.To)
	}
	if ok, why := job.CanTransition(d.From, d.To, job.ActorSlave); !ok {
		return errorf(http.StatusConflict, "%s", why)
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
	restart, err := h.store.EndJob(ctx, d.JobUUID, store.JobEnd{From: []job.Status{d.From}, To: d.To,
		Event: store.Event{Actor: "slave " + c.SlaveName, Message: msg}, ExitCode: d.ExitCode, Usage: usage, Restart: d.To == job.StatusHalted})
	if err != nil {
		return err
	}
	h.log.InfoContext(ctx, "job ended", "job", d.JobUUID, "status", d.To, "exit_code", d.ExitCode, "slave", c.SlaveName, "restart_job", restart)
	h.sched.Wake()
	w.WriteHeader(http.StatusNoContent)
	return nil
}
