package job

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// checkRoundTrip checks both ways a job is read again: the store's json.Unmarshal of the job
// JSON, and Parse of its submission form (Clone, POST convert). Both must give the same job.
func checkRoundTrip(t testing.TB, j *Job) {
	t.Helper()
	b := mustJSON(t, j)
	var stored Job
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatalf("json.Unmarshal of the job JSON: %v\n%s", err, b)
	}
	if !reflect.DeepEqual(&stored, j) {
		t.Errorf("job JSON does not read back the same:\n got %+v\nwant %+v\n%s", stored, *j, b)
	}
	if b2 := mustJSON(t, &stored); !bytes.Equal(b, b2) {
		t.Errorf("job JSON changed on a second round:\n%s\n%s", b, b2)
	}

	sub := mustJSON(t, Submission(j))
	again, err := Parse(sub, testOptions())
	if err != nil {
		t.Fatalf("Parse of the submission form: %v\n%s", err, sub)
	}
	want := j.Clone()
	want.Owner = Owner{ProjectURN: j.Owner.ProjectURN} // the submission form keeps only the project
	if !reflect.DeepEqual(again, want) {
		t.Errorf("submission form does not parse back the same:\n got %s\nwant %s", mustJSON(t, again), mustJSON(t, want))
	}
}
