package handlers

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/opengpulab/gpulab/store"
)

// maxShown bounds the jobs a shownCache keeps (a few kB each).
const maxShown = 10000

// shownCache keeps the v3.x JSON of ended jobs as shown lately: an ended job changes rarely,
// while lists and pages show the same ones again and again, and making their JSON was a third
// of the master's CPU of a list of 50 (bench B4). An entry is the JSON of one job in one API
// version for viewers who see it in full, or for those who see it sanitized; it serves only a
// read of the very same row (store.JobRecord.Version). What a running job shows depends on its
// viewer (SSH user names) and on its slave, so it is always made afresh, as is v4.0 (which
// shows facts of the slave).
type shownCache struct {
	mu   sync.Mutex
	jobs map[shownKey]shownEntry
}

type shownKey struct {
	uuid, version string
	sanitized     bool
}

type shownEntry struct {
	rowVersion uint64
	json       json.RawMessage
}

// get returns the JSON kept for the record as key shows it, or nil.
func (c *shownCache) get(k shownKey, rec *store.JobRecord) json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.jobs[k]; ok && e.rowVersion == rec.Version {
		return e.json
	}
	return nil
}

func (c *shownCache) put(k shownKey, rec *store.JobRecord, data json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jobs == nil {
		c.jobs = map[shownKey]shownEntry{}
	}
	if len(c.jobs) >= maxShown {
		for id := range c.jobs { // map order: an arbitrary quarter goes
			delete(c.jobs, id)
			if len(c.jobs) < maxShown*3/4 {
				break
			}
		}
	}
	c.jobs[k] = shownEntry{rowVersion: rec.Version, json: data}
}

// presentV3Cached is presentV3 through the cache for ended jobs.
func (h *Handlers) presentV3Cached(c *Caller, rec *store.JobRecord, version string, ssh map[string]sshEndpoint) (any, error) {
	if !rec.Job.State.Status.Ended() || rec.Version == 0 {
		return presentV3(c, rec, version, ssh, h.cfg.SSHJump), nil
	}
	k := shownKey{uuid: rec.Job.UUID, version: version, sanitized: c == nil || !canSee(c, rec)}
	if data := h.shown.get(k, rec); data != nil {
		return data, nil
	}
	data, err := json.Marshal(presentV3(c, rec, version, ssh, h.cfg.SSHJump))
	if err != nil {
		return nil, fmt.Errorf("encode job %s: %w", rec.Job.UUID, err)
	}
	h.shown.put(k, rec, data)
	return json.RawMessage(data), nil
}
