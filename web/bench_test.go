package web_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/opengpulab/gpulab/internal/testmaster"
)

// BenchmarkSubmitJob measures one POST jobs over real TLS with a client certificate, into a
// real Postgres: parse, validate, resolve the project, store the job and its first event.
func BenchmarkSubmitJob(b *testing.B) {
	m := testmaster.Start(b, testmaster.Options{})
	alice := m.AddUser("alice", false, "", "vision")
	client := m.Client(&alice.TLS)
	url := m.APIBase + "/jobs"
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := client.Post(url, "application/json", strings.NewReader(helloWorld))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkListJobs measures GET jobs (a page of 200) for a user with 1,000 jobs.
func BenchmarkListJobs(b *testing.B) {
	m := testmaster.Start(b, testmaster.Options{})
	alice := m.AddUser("alice", false, "", "vision")
	client := m.Client(&alice.TLS)
	for i := 0; i < 1000; i++ {
		resp, err := client.Post(m.APIBase+"/jobs", "application/json", strings.NewReader(helloWorld))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := client.Get(m.APIBase + "/jobs?page_size=200")
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}
