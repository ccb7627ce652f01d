package web_test

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
)

// An imec v1 file as imec's old client wrote it, submitted to a real master: its top-level
// project picks the project among the submitter's, `email_run: true` and `email_done: true`
// become the submitter's address in the e-mail lists, and nvdocker_data is taken as v1 too.
func TestSubmitImecV1File(t *testing.T) {
	w := newWorld(t)
	frank := w.m.AddUser("frank", false, "", "audio", "vision")
	data, err := os.ReadFile("../job/testdata/v1/imec_batch.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	def := doc["jobDefinition"].(map[string]any)
	delete(def, "clusterId") // no cluster 4 here
	def["resources"] = map[string]any{"gpus": 0, "systemMemory": 1024, "cpuCores": 1}
	body, _ := json.Marshal(doc)
	id := w.submit(t, frank, string(body), "")

	status, got, _ := w.m.Do(frank, "GET", v31+"/jobs/"+id, nil)
	if status != http.StatusOK {
		t.Fatalf("get: %d %s", status, got)
	}
	var j struct {
		Owner struct {
			ProjectURN string `json:"projectUrn"`
		} `json:"owner"`
		Request struct {
			Extra struct {
				EmailOnRun []string `json:"emailOnRun"`
				EmailOnEnd []string `json:"emailOnEnd"`
			} `json:"extra"`
		} `json:"request"`
	}
	if err := json.Unmarshal(got, &j); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(j.Owner.ProjectURN, "+project+vision") {
		t.Errorf("project = %q, want vision (the file's project)", j.Owner.ProjectURN)
	}
	if !slices.Equal(j.Request.Extra.EmailOnRun, []string{"frank@example.org"}) || !slices.Equal(j.Request.Extra.EmailOnEnd, []string{"frank@example.org"}) {
		t.Errorf("e-mail lists = %+v, want frank's address for run and end", j.Request.Extra)
	}

	// The nvdocker_data form converts without login; a `true` there would need a submitter.
	nv := `{"nvdocker_data": {"jobDefinition": {"name": "n", "dockerImage": "debian:stable", "jobType": "BATCH"}, "email_done": "a@example.org"}}`
	status, got, _ = w.m.Do(nil, "POST", v31+"/convert", strings.NewReader(nv))
	if status != http.StatusOK || !strings.Contains(string(got), "a@example.org") {
		t.Errorf("convert nvdocker_data: %d %s", status, got)
	}
	status, got, _ = w.m.Do(nil, "POST", v31+"/convert", strings.NewReader(`{"email_run": true, "jobDefinition": {"name": "n", "dockerImage": "x"}}`))
	if status != http.StatusBadRequest || !strings.Contains(string(got), "email_run") {
		t.Errorf("convert email_run true without login: %d %s, want 400 naming email_run", status, got)
	}
}
