package handlers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// Limits of an SSH login question (the slave's SSH server passes on what a client sent).
const (
	// maxSSHUser bounds the SSH user name: a job UUID (36) or its first 8 characters.
	maxSSHUser = 64
	// maxSSHPublicKey bounds the offered key (an RSA 16384-bit key is about 2.8 kB in base64).
	maxSSHPublicKey = 8 << 10
)

type sshAuthRequest protocol.SSHAuthRequest

func (m *sshAuthRequest) validate() error {
	if err := checkText("user", m.User, maxSSHUser); err != nil {
		return err
	}
	if err := checkText("publicKey", m.PublicKey, maxSSHPublicKey); err != nil {
		return err
	}
	return checkText("remoteAddr", m.RemoteAddr, maxSlaveText)
}

// SlaveSSHAuth answers a slave's SSH server: may this key log in to the job the SSH user name
// names? The master decides at every login, so that a disabled user, a removed profile key, a
// revoked certificate or a job that stopped running is refused at once, and the slave keeps no
// keys. A refusal is a 200 with Allowed false (the slave asked correctly); its reason is for the
// slave's log, never for the SSH client.
func (h *Handlers) SlaveSSHAuth(w http.ResponseWriter, r *http.Request) error {
	c, err := requireSlave(r)
	if err != nil {
		return err
	}
	var msg sshAuthRequest
	if err := decodeBody(w, r, &msg); err != nil {
		return err
	}
	req := protocol.SSHAuthRequest(msg)
	key, err := ParseSSHPublicKey(req.PublicKey)
	if err != nil {
		return fieldError("publicKey", "%v", err)
	}
	ctx := r.Context()
	ans, err := h.sshAuth(ctx, c.SlaveName, req.User, key)
	if err != nil {
		return err
	}
	from := sshClientHost(req.RemoteAddr)
	if !ans.Allowed {
		h.log.InfoContext(ctx, "ssh login refused", "slave", c.SlaveName, "user", req.User, "key", key.Fingerprint, "from", from, "why", ans.Reason)
		writeJSON(w, http.StatusOK, ans)
		return nil
	}
	if err := h.store.AddJobEvent(ctx, store.Event{JobUUID: ans.JobUUID, Kind: store.EventInfo, Actor: "slave " + c.SlaveName,
		Message: fmt.Sprintf("ssh login by %s from %s (key %s)", ans.UserName, from, key.Fingerprint)}); err != nil {
		return err
	}
	h.log.InfoContext(ctx, "ssh login", "slave", c.SlaveName, "job", ans.JobUUID, "user", ans.UserName, "key", key.Fingerprint, "from", from)
	writeJSON(w, http.StatusOK, ans)
	return nil
}

// sshClientHost is the client's address without its port, for the event ("10.0.0.5").
func sshClientHost(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	if addr == "" {
		return "an unknown address"
	}
	return addr
}

// sshAuth decides a login: the job the user name names is RUNNING on the asking slave, its
// owner is not disabled, and the key is one of the job's sshPubKeys, the owner's profile keys
// or the key of one of the owner's valid login certificates.
func (h *Handlers) sshAuth(ctx context.Context, slave, user string, key SSHPublicKey) (protocol.SSHAuthAnswer, error) {
	refuse := func(format string, args ...any) (protocol.SSHAuthAnswer, error) {
		return protocol.SSHAuthAnswer{Reason: fmt.Sprintf(format, args...)}, nil
	}
	rec, err := h.sshJob(ctx, slave, user)
	if errors.Is(err, store.ErrNotFound) {
		return refuse("no job %q runs on slave %s", user, slave)
	} else if errors.Is(err, store.ErrAmbiguous) {
		return refuse("%q names more than one job running on slave %s: use the full job id", user, slave)
	} else if err != nil {
		return protocol.SSHAuthAnswer{}, err
	}
	owner, err := h.store.GetUserByName(ctx, rec.UserName)
	if err != nil {
		return protocol.SSHAuthAnswer{}, err
	}
	if owner.Disabled {
		return refuse("user %s is disabled", owner.Name)
	}
	ok, err := h.sshKeyOf(ctx, rec, owner, key)
	if err != nil {
		return protocol.SSHAuthAnswer{}, err
	}
	if !ok {
		return refuse("key %s is neither in the job's sshPubKeys, nor on %s's profile, nor the key of a valid login certificate of %s",
			key.Fingerprint, owner.Name, owner.Name)
	}
	return protocol.SSHAuthAnswer{Allowed: true, JobUUID: rec.Job.UUID, UserName: owner.Name}, nil
}

// sshJob finds the job an SSH user name names among those RUNNING on the slave: its full UUID
// or its first 8 characters (imec's short id). ErrNotFound for anything else, ErrAmbiguous when
// the short id matches two running jobs.
func (h *Handlers) sshJob(ctx context.Context, slave, user string) (*store.JobRecord, error) {
	user = strings.ToLower(user)
	running := func(rec *store.JobRecord) bool {
		return rec.Job.State.Status == job.StatusRunning && rec.Job.State.Scheduling.AssignedSlaveName == slave
	}
	switch {
	case checkJobUUID("user", user) == nil:
		rec, err := h.store.GetJob(ctx, user)
		if err != nil {
			return nil, err
		}
		if !running(rec) {
			return nil, fmt.Errorf("job %s is not running on %s: %w", user, slave, store.ErrNotFound)
		}
		return rec, nil
	case len(user) == 8 && strings.Trim(user, "0123456789abcdef") == "":
		recs, err := h.store.ListJobs(ctx, store.JobFilter{Statuses: []job.Status{job.StatusRunning}, AssignedSlaveName: slave})
		if err != nil {
			return nil, err
		}
		recs = slices.DeleteFunc(recs, func(rec *store.JobRecord) bool { return !running(rec) })
		ids := make([]string, len(recs))
		for i, rec := range recs {
			ids[i] = rec.Job.UUID
		}
		i, err := pickShortID(ids, user)
		if err != nil {
			return nil, fmt.Errorf("job %s on %s: %w", user, slave, err)
		}
		return recs[i], nil
	}
	return nil, fmt.Errorf("ssh user %q names no job: %w", user, store.ErrNotFound)
}

// pickShortID finds the one id that starts with short: its index, else ErrNotFound, or
// ErrAmbiguous when two do (imec's 8-character ids can collide; a login must never land in
// the wrong job).
func pickShortID(ids []string, short string) (int, error) {
	found := -1
	for i, id := range ids {
		if !strings.HasPrefix(id, short) {
			continue
		}
		if found >= 0 {
			return -1, store.ErrAmbiguous
		}
		found = i
	}
	if found < 0 {
		return -1, store.ErrNotFound
	}
	return found, nil
}

// sshKeyOf reports whether key may log in to the job: one of its sshPubKeys, one of the owner's
// profile keys, or the key of one of the owner's valid login certificates. Keys compare by
// fingerprint, so comments and blanks do not matter.
func (h *Handlers) sshKeyOf(ctx context.Context, rec *store.JobRecord, owner store.User, key SSHPublicKey) (bool, error) {
	for _, line := range rec.Job.Request.Extra.SSHPubKeys {
		if k, err := ParseSSHPublicKey(line); err == nil && k.Fingerprint == key.Fingerprint {
			return true, nil
		}
	}
	keys, err := h.store.ListSSHKeys(ctx, owner.ID)
	if err != nil {
		return false, err
	}
	for _, k := range keys {
		if k.Fingerprint == key.Fingerprint {
			return true, nil
		}
	}
	return h.store.HasValidCertificateKey(ctx, owner.Name, key.Fingerprint)
}
