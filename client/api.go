package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/job"
)

// Version asks the master for its version and the latest client version it knows of. It needs
// no certificate.
func (c *Client) Version(ctx context.Context) (*VersionInfo, error) {
	var v VersionInfo
	if err := c.getJSON(ctx, "version", nil, &v); err != nil {
		return nil, fmt.Errorf("get master version: %w", err)
	}
	return &v, nil
}

// SubmitJob submits a job request (version 2 or version 1 JSON, sent as given) and returns the
// new job's UUID. With hold the job starts ONHOLD instead of QUEUED.
func (c *Client) SubmitJob(ctx context.Context, body []byte, hold bool) (string, error) {
	q := url.Values{}
	if hold {
		q.Set("hold", "true")
	}
	// A key of this submission: the master answers a repeat with the job the first attempt
	// made, so a submit whose answer was lost may be sent again like any idempotent call.
	resp, err := c.do(ctx, request{
		method: http.MethodPost, path: "jobs", query: q, body: body,
		contentType: "application/json", accept: "text/plain, application/json;q=0.5",
		header: http.Header{"Idempotency-Key": {uuid.NewString()}}, replayable: true,
	})
	if err != nil {
		return "", fmt.Errorf("submit job: %w", err)
	}
	id, err := uuidFromSubmitAnswer(resp.body)
	if err != nil {
		return "", fmt.Errorf("submit job: %w", err)
	}
	return id, nil
}

// uuidFromSubmitAnswer reads the UUID from the answer to `POST jobs`: plain text as the API
// documents, a JSON string, or the job JSON (when a server ignores our Accept header).
func uuidFromSubmitAnswer(body []byte) (string, error) {
	text := strings.TrimSpace(string(body))
	switch {
	case strings.HasPrefix(text, "{"):
		var j struct {
			UUID string `json:"uuid"`
		}
		if err := json.Unmarshal(body, &j); err != nil || j.UUID == "" {
			return "", fmt.Errorf("no job uuid in the master's answer %q", firstLines(text, 3))
		}
		return j.UUID, nil
	case strings.HasPrefix(text, `"`):
		var s string
		if err := json.Unmarshal(body, &s); err != nil {
			return "", fmt.Errorf("unreadable job uuid %q: %w", text, err)
		}
		return s, nil
	case text == "" || strings.ContainsAny(text, " \n\t"):
		return "", fmt.Errorf("no job uuid in the master's answer %q", firstLines(text, 3))
	}
	return text, nil
}

// ListJobs lists jobs matching the options, in the master's order.
func (c *Client) ListJobs(ctx context.Context, opts ListOptions) ([]job.Job, error) {
	raw, err := c.ListJobsRaw(ctx, opts)
	if err != nil {
		return nil, err
	}
	var jobs []job.Job
	if err := json.Unmarshal(raw, &jobs); err != nil {
		return nil, fmt.Errorf("list jobs: decode answer: %w", err)
	}
	return jobs, nil
}

// ListJobsRaw is ListJobs without decoding: the JSON array exactly as the master sent it, for
// output that must not lose fields this client does not know.
func (c *Client) ListJobsRaw(ctx context.Context, opts ListOptions) (json.RawMessage, error) {
	raw, err := c.getList(ctx, "jobs", opts.Query())
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return raw, nil
}

// GetJob fetches one job. id may be a unique prefix of at least 6 characters.
func (c *Client) GetJob(ctx context.Context, id string) (*job.Job, error) {
	raw, err := c.GetJobRaw(ctx, id)
	if err != nil {
		return nil, err
	}
	var j job.Job
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("get job %s: decode answer: %w", id, err)
	}
	return &j, nil
}

// GetJobRaw is GetJob without decoding: the job JSON exactly as the master sent it.
func (c *Client) GetJobRaw(ctx context.Context, id string) (json.RawMessage, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, path: jobPath(id, "")})
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", id, err)
	}
	if !json.Valid(resp.body) {
		return nil, fmt.Errorf("get job %s: the master's answer is not JSON: %q", id, firstLines(string(resp.body), 3))
	}
	return resp.body, nil
}

// SetStatus asks for a state change: CANCELLED, MUSTHALT (halt), ONHOLD (hold) or QUEUED
// (release). The master answers 409 when the job's state does not allow it. When an attempt
// whose answer was lost had to be repeated, a 409 may be the first attempt's own doing: if
// the job is then in the state asked for (or, for a halt, on its way out), that is success.
func (c *Client) SetStatus(ctx context.Context, id string, status job.Status) error {
	if err := checkID(id); err != nil {
		return err
	}
	var repeated bool
	_, err := c.do(ctx, request{
		method: http.MethodPut, path: jobPath(id, "state/status"),
		body: []byte(status), contentType: "text/plain", repeated: &repeated,
	})
	if err != nil && repeated && StatusCode(err) == http.StatusConflict {
		if j, gerr := c.GetJob(ctx, id); gerr == nil && reached(j.State.Status, status) {
			return nil
		}
		err = fmt.Errorf("%w (an earlier attempt, whose answer was lost, may have changed the job)", err)
	}
	if err != nil {
		return fmt.Errorf("set job %s to %s: %w", id, status, err)
	}
	return nil
}

// reached reports whether a job in state now shows that a change to want took place.
func reached(now, want job.Status) bool {
	if now == want {
		return true
	}
	return want == job.StatusMustHalt && (now == job.StatusHalting || now == job.StatusHalted)
}

// DeleteJob deletes a job (marks it DELETED, or removes it with opts.Real). Marking is
// idempotent; a removal repeated after a lost answer finds the job gone, which is success.
func (c *Client) DeleteJob(ctx context.Context, id string, opts DeleteOptions) error {
	if err := checkID(id); err != nil {
		return err
	}
	var repeated bool
	_, err := c.do(ctx, request{method: http.MethodDelete, path: jobPath(id, ""), query: opts.query(), repeated: &repeated})
	if err != nil && repeated && opts.Real && StatusCode(err) == http.StatusNotFound {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	return nil
}

// Log fetches a job's log from byte offset on and returns the new bytes and the offset to ask
// for next time, so that following a log never repeats or skips output. No new output gives
// empty data and the same offset.
func (c *Client) Log(ctx context.Context, id string, offset int64) ([]byte, int64, error) {
	if err := checkID(id); err != nil {
		return nil, offset, err
	}
	r := request{
		method: http.MethodGet, path: jobPath(id, "log"), accept: "text/plain, */*",
		okStatus: []int{http.StatusRequestedRangeNotSatisfiable},
	}
	if offset > 0 {
		r.header = http.Header{"Range": {fmt.Sprintf("bytes=%d-", offset)}}
	}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, offset, fmt.Errorf("get log of job %s: %w", id, err)
	}
	switch resp.status {
	case http.StatusNoContent, http.StatusRequestedRangeNotSatisfiable:
		return nil, offset, nil
	case http.StatusPartialContent:
		end, ok := contentRangeEnd(resp.header.Get("Content-Range"))
		if !ok {
			return resp.body, offset + int64(len(resp.body)), nil
		}
		return resp.body, end + 1, nil
	}
	// A full answer: the master ignored the range (or none was asked). Skip what we already have.
	data := resp.body
	if offset >= int64(len(data)) {
		return nil, int64(len(data)), nil
	}
	return data[offset:], int64(len(data)), nil
}

// contentRangeEnd reads the last byte position from "bytes START-END/TOTAL".
func contentRangeEnd(h string) (int64, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(h), "bytes ")
	if !ok {
		return 0, false
	}
	span, _, _ := strings.Cut(rest, "/")
	_, endText, ok := strings.Cut(span, "-")
	if !ok {
		return 0, false
	}
	end, err := strconv.ParseInt(strings.TrimSpace(endText), 10, 64)
	if err != nil || end < 0 {
		return 0, false
	}
	return end, true
}

// Debug fetches a job's events, oldest first.
func (c *Client) Debug(ctx context.Context, id string) ([]Event, error) {
	raw, err := c.DebugRaw(ctx, id)
	if err != nil {
		return nil, err
	}
	var events []Event
	if err := json.Unmarshal(raw, &events); err != nil {
		return nil, fmt.Errorf("get events of job %s: decode answer: %w", id, err)
	}
	return events, nil
}

// DebugRaw is Debug without decoding.
func (c *Client) DebugRaw(ctx context.Context, id string) (json.RawMessage, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	raw, err := c.getList(ctx, jobPath(id, "debug"), nil)
	if err != nil {
		return nil, fmt.Errorf("get events of job %s: %w", id, err)
	}
	return raw, nil
}

// Convert asks the master to convert a job request (version 1 or 2) to normalised version 2
// JSON.
func (c *Client) Convert(ctx context.Context, body []byte) ([]byte, error) {
	resp, err := c.do(ctx, request{
		method: http.MethodPost, path: "convert", body: body, contentType: "application/json",
		replayable: true, // a conversion stores nothing
	})
	if err != nil {
		return nil, fmt.Errorf("convert job: %w", err)
	}
	return resp.body, nil
}

// Clusters lists the clusters with their slaves. It needs no certificate.
func (c *Client) Clusters(ctx context.Context) ([]Cluster, error) {
	raw, err := c.ClustersRaw(ctx)
	if err != nil {
		return nil, err
	}
	var out []Cluster
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("list clusters: decode answer: %w", err)
	}
	return out, nil
}

// ClustersRaw is Clusters without decoding.
func (c *Client) ClustersRaw(ctx context.Context) (json.RawMessage, error) {
	raw, err := c.getList(ctx, "clusters", nil)
	if err != nil {
		return nil, fmt.Errorf("list clusters: %w", err)
	}
	return raw, nil
}

// Slaves lists all slaves. It needs no certificate.
func (c *Client) Slaves(ctx context.Context) ([]Slave, error) {
	raw, err := c.SlavesRaw(ctx)
	if err != nil {
		return nil, err
	}
	var out []Slave
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("list slaves: decode answer: %w", err)
	}
	return out, nil
}

// SlavesRaw is Slaves without decoding.
func (c *Client) SlavesRaw(ctx context.Context) (json.RawMessage, error) {
	raw, err := c.getList(ctx, "slaves", nil)
	if err != nil {
		return nil, fmt.Errorf("list slaves: %w", err)
	}
	return raw, nil
}

func (c *Client) getJSON(ctx context.Context, path string, q url.Values, out any) error {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: path, query: q})
	if err != nil {
		return err
	}
	if err := json.Unmarshal(resp.body, out); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}

// getList fetches a list and returns it as a JSON array. The v3.x API answers an array; v4.0
// wraps it as {"items": [...]}, which is unwrapped so that either base URL works. A null or
// empty answer is an empty list.
func (c *Client) getList(ctx context.Context, path string, q url.Values) (json.RawMessage, error) {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: path, query: q})
	if err != nil {
		return nil, err
	}
	body := bytes.TrimSpace(resp.body)
	switch {
	case len(body) == 0 || string(body) == "null":
		return json.RawMessage("[]"), nil
	case body[0] == '[':
		if !json.Valid(body) {
			return nil, fmt.Errorf("the master's answer is not valid JSON")
		}
		return body, nil
	case body[0] == '{':
		var wrapped struct {
			Items json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(body, &wrapped); err == nil && len(wrapped.Items) > 0 && wrapped.Items[0] == '[' {
			return wrapped.Items, nil
		}
	}
	return nil, fmt.Errorf("the master's answer is not a JSON list: %q", firstLines(string(body), 3))
}

// jobPath is the escaped path of a job or one of its sub-resources.
func jobPath(id, sub string) string {
	p := "jobs/" + url.PathEscape(id)
	if sub != "" {
		p += "/" + sub
	}
	return p
}

func checkID(id string) error {
	if strings.TrimSpace(id) == "" {
		return fmt.Errorf("empty job id")
	}
	return nil
}
