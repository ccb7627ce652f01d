package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// cpuShares splits a CPU profile of the master by what each sample's stack was doing: the
// Postgres client (lib/pq and database/sql, with their socket I/O), TLS (crypto/tls, with the
// encrypted connections' ciphers and socket I/O), the collector's background marking, and the rest, the
// master's own work (HTTP, routing, authentication, JSON or HTML, logging, and the allocation
// and GC assists that come with them). Issue 16's goal for reads where the two cores cannot
// serve the rate: the master's own CPU per request ≤ 50 µs, Postgres and TLS taking the rest.
type cpuShares struct {
	total, postgres, tls, collector, own time.Duration
}

// readCPUShares reads a CPU profile (the master's /debug/pprof/profile) and splits it.
func readCPUShares(file string) (cpuShares, error) {
	f, err := os.Open(file)
	if err != nil {
		return cpuShares{}, err
	}
	defer func() { _ = f.Close() }()
	p, err := profile.Parse(f)
	if err != nil {
		return cpuShares{}, fmt.Errorf("parse %s: %w", file, err)
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			idx = i
		}
	}
	if idx < 0 {
		return cpuShares{}, fmt.Errorf("%s: no cpu nanoseconds among the sample types", file)
	}
	var c cpuShares
	for _, s := range p.Sample {
		d := time.Duration(s.Value[idx])
		c.total += d
		switch stackKind(s) {
		case "postgres":
			c.postgres += d
		case "tls":
			c.tls += d
		case "collector":
			c.collector += d
		default:
			c.own += d
		}
	}
	return c, nil
}

// stackKind names what a sample was doing (cpuShares): the Postgres client wins over TLS (a
// statement's socket write is the client's), both over the collector.
func stackKind(s *profile.Sample) string {
	kind := ""
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			if l.Function == nil {
				continue
			}
			name := l.Function.Name
			switch {
			case strings.HasPrefix(name, "github.com/lib/pq.") || strings.HasPrefix(name, "database/sql."):
				return "postgres"
			case strings.HasPrefix(name, "crypto/tls."):
				kind = "tls"
			case kind == "" && strings.HasPrefix(name, "runtime.gcBgMarkWorker"):
				kind = "collector"
			}
		}
	}
	return kind
}

// perRequest divides the master's CPU (cores, over a run of rate requests a second) among the
// shares, in µs a request.
func (c cpuShares) perRequest(cores, rate float64) (all, own, postgres, tls, collector float64) {
	us := 1e6 * cores / max(rate, 1e-9)
	part := func(d time.Duration) float64 { return us * d.Seconds() / c.total.Seconds() }
	return us, part(c.own), part(c.postgres), part(c.tls), part(c.collector)
}

// A profile's samples are split by their stacks: the Postgres client's (even under a TLS
// frame), TLS's, the collector's background marking, and the rest the master's own.
func TestCPUShares(t *testing.T) {
	fns := map[string]*profile.Function{}
	loc := func(names ...string) []*profile.Location {
		var out []*profile.Location
		for _, n := range names {
			if fns[n] == nil {
				fns[n] = &profile.Function{ID: uint64(len(fns) + 1), Name: n}
			}
			out = append(out, &profile.Location{ID: uint64(len(fns)*100 + len(out) + 1), Line: []profile.Line{{Function: fns[n]}}})
		}
		return out
	}
	ms := func(n int64) []int64 { return []int64{n, n * 1e6} }
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			{Location: loc("syscall.Syscall6", "github.com/lib/pq.(*conn).send", "database/sql.(*DB).QueryContext", "net/http.HandlerFunc.ServeHTTP"), Value: ms(30)},
			{Location: loc("crypto/internal/fips140/aes/gcm.seal", "crypto/tls.(*Conn).Write", "net/http.(*response).finishRequest"), Value: ms(20)},
			{Location: loc("runtime.scanObject", "runtime.gcDrain", "runtime.gcBgMarkWorker"), Value: ms(10)},
			{Location: loc("encoding/json.Marshal", "crypto/hmac.New", "net/http.HandlerFunc.ServeHTTP"), Value: ms(40)},
		},
	}
	for _, l := range p.Sample {
		p.Location = append(p.Location, l.Location...)
	}
	for _, f := range fns {
		p.Function = append(p.Function, f)
	}
	file := filepath.Join(t.TempDir(), "cpu.pprof")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := readCPUShares(file)
	if err != nil {
		t.Fatal(err)
	}
	want := cpuShares{total: 100 * time.Millisecond, postgres: 30 * time.Millisecond, tls: 20 * time.Millisecond, collector: 10 * time.Millisecond, own: 40 * time.Millisecond}
	if got != want {
		t.Errorf("shares %+v, want %+v", got, want)
	}
	// 0.5 cores at 5,000 requests a second: 100 µs a request.
	if all, own, pg, tls, gc := got.perRequest(0.5, 5000); all != 100 || own != 40 || pg != 30 || tls != 20 || gc != 10 {
		t.Errorf("per request %v %v %v %v %v, want 100 40 30 20 10", all, own, pg, tls, gc)
	}
}
