package client

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// VersionInfo is the master's answer to `GET version`.
type VersionInfo struct {
	Version             string `json:"version"`
	LatestClientVersion string `json:"latest_client_version"`
}

// ListOptions are the filters of `GET jobs`. Zero values are left out of the query, so the
// master's own defaults apply to what is not set.
type ListOptions struct {
	// State groups: pending (ONHOLD, QUEUED), running (ASSIGNED ... HALTING), finished (ended
	// but not deleted) and deleted.
	Pending, Running, Finished, Deleted bool
	UserURN, UserName                   string
	ProjectURN, ProjectName             string
	// ClusterID limits to one cluster; 0 means any.
	ClusterID int
	// MaxHours limits to jobs created in the last hours; MaxCount to that many jobs.
	MaxHours, MaxCount int
	Page, PageSize     int
	// Sort is the master's sort key, e.g. "-created" (newest first).
	Sort string
	// OtherUserRunning adds the running jobs of other users to a list filtered on a user.
	OtherUserRunning bool
}

// Query encodes the options as the API's query parameters.
func (o ListOptions) Query() url.Values {
	q := url.Values{}
	setBool := func(k string, v bool) {
		if v {
			q.Set(k, "true")
		}
	}
	setStr := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	setInt := func(k string, v int) {
		if v > 0 {
			q.Set(k, strconv.Itoa(v))
		}
	}
	setBool("pending", o.Pending)
	setBool("running", o.Running)
	setBool("finished", o.Finished)
	setBool("deleted", o.Deleted)
	setStr("user_urn", o.UserURN)
	setStr("user_name", o.UserName)
	setStr("project_urn", o.ProjectURN)
	setStr("project_name", o.ProjectName)
	setInt("cluster_id", o.ClusterID)
	setInt("max_hours", o.MaxHours)
	setInt("max_count", o.MaxCount)
	setInt("page", o.Page)
	setInt("page_size", o.PageSize)
	setStr("sort", o.Sort)
	setBool("other_user_running", o.OtherUserRunning)
	return q
}

// DeleteOptions are the flags of `DELETE jobs/{id}`, with imec's meanings.
type DeleteOptions struct {
	// Finished allows deleting a job that has ended.
	Finished bool
	// Real removes the job from the database instead of marking it DELETED (admins only).
	Real bool
	// Force deletes whatever state the job is in (admins only).
	Force bool
}

func (o DeleteOptions) query() url.Values {
	q := url.Values{}
	if o.Finished {
		q.Set("finished", "true")
	}
	if o.Real {
		q.Set("real", "true")
	}
	if o.Force {
		q.Set("force", "true")
	}
	return q
}

// Event is one entry of a job's history (`GET jobs/{id}/debug`): a state change, a warning or a
// scheduler explanation.
type Event struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Status  string    `json:"status,omitempty"`
	Message string    `json:"message,omitempty"`
}

// UnmarshalJSON reads an event tolerantly: a time that is not RFC 3339 is left zero rather than
// failing the whole history, and imec's `newState`/`msg` names are accepted too.
func (e *Event) UnmarshalJSON(data []byte) error {
	var raw struct {
		Time     string `json:"time"`
		Type     string `json:"type"`
		Status   string `json:"status"`
		NewState string `json:"newState"`
		Message  string `json:"message"`
		Msg      string `json:"msg"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("decode job event: %w", err)
	}
	*e = Event{Type: raw.Type, Status: raw.Status, Message: raw.Message}
	if e.Status == "" {
		e.Status = raw.NewState
	}
	if e.Message == "" {
		e.Message = raw.Msg
	}
	if raw.Time != "" {
		if t, err := time.Parse(time.RFC3339Nano, raw.Time); err == nil {
			e.Time = t
		}
	}
	return nil
}

// Cluster is one cluster of `GET clusters` with its slaves.
type Cluster struct {
	ID      int     `json:"id"`
	Name    string  `json:"name"`
	Private bool    `json:"private"`
	Slaves  []Slave `json:"slaves"`
}

// Slave is one worker machine as `GET slaves` (and each cluster) describes it. Capacities are
// free/total pairs.
type Slave struct {
	Name      string `json:"name"`
	Host      string `json:"host"`
	ClusterID int    `json:"clusterId"`
	Version   string `json:"version"`
	// Online is nil when the master does not say; such a slave is shown as online.
	Online      *bool    `json:"online,omitempty"`
	Fake        bool     `json:"fake"`
	Workers     Amount   `json:"workers"`
	GPUs        Amount   `json:"gpus"`
	CPUs        Amount   `json:"cpus"`
	MemoryGb    Amount   `json:"memoryGb"`
	GPUModels   []string `json:"gpuModels"`
	CudaVersion string   `json:"cudaVersion"`
}

// IsOnline reports whether the slave is online (true when the master does not say).
func (s Slave) IsOnline() bool { return s.Online == nil || *s.Online }

// Amount is a free/total pair of a resource. Floats so that fractional memory and any
// number the master sends read without error.
type Amount struct {
	Free  float64 `json:"free"`
	Total float64 `json:"total"`
}

// UnmarshalJSON reads a slave tolerantly: version and cudaVersion may come as numbers.
func (s *Slave) UnmarshalJSON(data []byte) error {
	type plain Slave
	var aux struct {
		plain
		Version     json.RawMessage `json:"version"`
		CudaVersion json.RawMessage `json:"cudaVersion"`
	}
	if err := json.Unmarshal(data, &aux); err != nil {
		return fmt.Errorf("decode slave: %w", err)
	}
	*s = Slave(aux.plain)
	s.Version = looseString(aux.Version)
	s.CudaVersion = looseString(aux.CudaVersion)
	return nil
}

// looseString reads a JSON string, number or null as text.
func looseString(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}
