package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics, that it fails only with the two documented error
// types, and that every job it accepts survives being stored and re-read (json.Marshal then
// json.Unmarshal) and being submitted again (its Submission form through Parse).
func FuzzParse(f *testing.F) {
	for _, file := range seedFiles(f) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"name":"x","request":{"resources":{"cpus":"2","gpus":0,"cpuMemoryGb":1e0},"docker":{"image":"u:p@r.io/a:b","command":["a"],"storage":["/p",{"hostPath":"tmpfs","containerPath":"/r","sizeGb":1}],"portMappings":[80,"81/tcp"]},"scheduling":{"killableAfter":60,"maxDuration":"1.5 h","reservationId":"F6DBCA7B-58FD-47E3-9AC4-9AD33E7F6030","notBefore":"2030-01-01T00:00:00.5-07:00"}},"extra":{"emailOnEnd":"a@b"}}`))
	f.Add([]byte(`{"jobDefinition":{"name":"x","dockerImage":"x","clusterId":["3"],"resources":{"systemMemory":"1500.5"},"portMappings":["22/tcp"]}}`))
	opts := testOptions()
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := Parse(data, opts)
		if err != nil {
			var se *SyntaxError
			var ve *ValidationError
			if !errors.As(err, &se) && !errors.As(err, &ve) {
				t.Fatalf("Parse error of type %T: %v", err, err)
			}
			if ve != nil && len(ve.Problems) == 0 {
				t.Fatal("ValidationError without problems")
			}
			return
		}
		// Stored and re-read.
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var stored Job
		if err := json.Unmarshal(b, &stored); err != nil {
			t.Fatalf("Unmarshal of the job JSON: %v\n%s", err, b)
		}
		if b2, _ := json.Marshal(&stored); !bytes.Equal(b, b2) {
			t.Fatalf("job JSON changed after a round trip:\n%s\n%s", b, b2)
		}
		// Submitted again.
		sub, err := json.Marshal(Submission(j))
		if err != nil {
			t.Fatalf("Marshal submission: %v", err)
		}
		again, err := Parse(sub, opts)
		if err != nil {
			t.Fatalf("accepted job does not parse again: %v\nin:  %s\nout: %s", err, data, sub)
		}
		want := j.Clone()
		want.Owner = Owner{ProjectURN: j.Owner.ProjectURN}
		if !reflect.DeepEqual(again, want) {
			t.Fatalf("job changed after a round trip:\nin:  %s\nout: %s\nnow: %s", data, sub, mustJSON(t, again))
		}
		// The redacted copies must be valid JSON documents too.
		if _, err := json.Marshal(j.Redacted()); err != nil {
			t.Fatal(err)
		}
		if _, err := json.Marshal(j.Sanitized()); err != nil {
			t.Fatal(err)
		}
	})
}
