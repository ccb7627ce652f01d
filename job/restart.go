package job

import (
	"fmt"
	"time"
)

// MinRestartDuration is the least maxDuration a restart job may have; a job with less left is
// not restarted (it could do no useful work before being cancelled).
const MinRestartDuration = time.Minute

// RestartOf makes the job that continues a halted (or lost) restartable job: a new UUID, the
// same request with maxDuration reduced by the time already run (SPEC 4), QUEUED, and restart
// information pointing at the first job of the chain. It returns an error when the job is not
// restartable or has too little maxDuration left.
func RestartOf(j *Job, newUUID string, ran time.Duration) (*Job, error) {
	if !j.Request.Scheduling.Restartable {
		return nil, fmt.Errorf("job %s is not restartable", j.UUID)
	}
	left := time.Duration(j.Request.Scheduling.MaxDuration) - ran
	if left < MinRestartDuration {
		return nil, fmt.Errorf("job %s has %s of its maxDuration left, less than %s", j.UUID, FormatDuration(max(left, 0).Round(time.Second)), FormatDuration(MinRestartDuration))
	}
	r := j.Clone()
	r.UUID = newUUID
	r.State = State{Status: StatusQueued}
	r.Request.Scheduling.MaxDuration = Duration(left.Truncate(time.Second)) // never more than is left
	if time.Duration(r.Request.Scheduling.MinDuration) > left.Truncate(time.Second) {
		r.Request.Scheduling.MinDuration = r.Request.Scheduling.MaxDuration
	}
	initial, count := j.UUID, 1
	if j.RestartInfo != nil {
		initial, count = j.RestartInfo.InitialJobUUID, j.RestartInfo.RestartCount+1
	}
	r.RestartInfo = &RestartInfo{InitialJobUUID: initial, RestartCount: count}
	return r, nil
}
