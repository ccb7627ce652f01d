package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/client"
	"github.com/opengpulab/gpulab/job"
)

// timeLayout is how times are shown: local time in ISO 8601 with the zone and without
// fractions, as imec's CLI shows them.
const timeLayout = "2006-01-02T15:04:05-07:00"

func (a *app) formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.In(a.loc).Truncate(time.Second).Format(timeLayout)
}

// ago writes how long ago t was ("5m12s ago").
func (a *app) ago(t time.Time) string {
	d := a.now().Sub(t)
	if d < 0 {
		return "in " + humanDuration(-d)
	}
	return humanDuration(d) + " ago"
}

// humanDuration writes an elapsed time compactly and to the second: "3d4h5m", "2h0m7s", "45s".
func humanDuration(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%ds", int(d.Seconds()))
	}
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	h := d / time.Hour
	d -= h * time.Hour
	m := d / time.Minute
	d -= m * time.Minute
	s := d / time.Second
	switch {
	case days > 0:
		return fmt.Sprintf("%dd%dh%dm", days, h, m)
	case h > 0:
		return fmt.Sprintf("%dh%dm%ds", h, m, s)
	}
	return fmt.Sprintf("%dm%ds", m, s)
}

// miniID is the short user name shown in lists: name@authority, with imec's abbreviations for
// its own authorities and the first label of others (alice@gpulab for
// urn:publicid:IDN+gpulab.example.org+user+alice).
func miniID(urn string) string {
	auth, _, name := client.SplitURN(urn)
	if name == "" {
		return urn
	}
	switch auth {
	case "wall2.ilabt.iminds.be":
		auth = "w2"
	case "ilabt.imec.be":
		auth = "ilabt"
	default:
		if i := strings.IndexByte(auth, '.'); i > 0 {
			auth = auth[:i]
		}
	}
	return name + "@" + auth
}

// urnName is the name part of a URN, or the text itself when it is not one.
func urnName(urn string) string {
	if _, _, name := client.SplitURN(urn); name != "" {
		return name
	}
	return urn
}

var credentialsRe = regexp.MustCompile(`^([^/@:]+):[^/@]*@`)

// redactImage hides the registry password of an image (user:XXXX@host/...), also when the
// image does not parse.
func redactImage(image string) string {
	if img, err := job.ParseImage(image); err == nil {
		return img.Redacted()
	}
	return credentialsRe.ReplaceAllString(image, "${1}:"+job.RedactedPassword+"@")
}

// createdAt returns the first of a job's event times: when it was created.
func createdAt(j *job.Job) time.Time {
	var first time.Time
	for _, t := range j.State.EventTimes {
		if !t.IsZero() && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return first
}

// updatedAt returns the last of a job's event times: when its state last changed.
func updatedAt(j *job.Job) time.Time {
	var last time.Time
	for _, t := range j.State.EventTimes {
		if t.After(last) {
			last = t
		}
	}
	return last
}

// endedAt returns when a job ended, or zero while it has not.
func endedAt(j *job.Job) time.Time {
	if !j.State.Status.Ended() {
		return time.Time{}
	}
	if t, ok := j.State.EventTimes[j.State.Status]; ok {
		return t
	}
	return updatedAt(j)
}

// clusterOf is the cluster a job runs on (or was assigned to, or asked for).
func clusterOf(j *job.Job) string {
	switch {
	case j.State.Resources != nil && j.State.Resources.ClusterID != 0:
		return strconv.Itoa(j.State.Resources.ClusterID)
	case j.State.Scheduling.AssignedClusterID != 0:
		return strconv.Itoa(j.State.Scheduling.AssignedClusterID)
	case j.Request.Resources.ClusterID != 0:
		return strconv.Itoa(j.Request.Resources.ClusterID)
	}
	return ""
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeJSON pretty-prints JSON with 4 spaces, as imec's CLI does for --raw output.
func (a *app) writeJSON(data []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(data), "", "    "); err != nil {
		return fmt.Errorf("format JSON: %w", err)
	}
	buf.WriteByte('\n')
	a.stdout.write(buf.Bytes())
	return nil
}

// writeValue pretty-prints v as JSON, leaving characters such as & in commands unescaped.
func (a *app) writeValue(v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "    ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	a.stdout.write(buf.Bytes())
	return nil
}

func joinInts(ids []int) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(id)
	}
	return strings.Join(parts, ",")
}
