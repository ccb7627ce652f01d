package job

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// defaultLimitProblems parses data with the default limits (not testOptions' wide port range).
func defaultLimitProblems(t *testing.T, data []byte) []Problem {
	t.Helper()
	o := testOptions()
	o.Limits = DefaultLimits()
	_, err := Parse(data, o)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Parse: got %v, want a *ValidationError\n%.300s", err, data)
	}
	return ve.Problems
}

func TestLimits(t *testing.T) {
	many := func(n int, f func(i int) any) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	env := map[string]any{}
	for i := range 10000 {
		env[fmt.Sprintf("V%d", i)] = "x"
	}
	big := strings.Repeat("a", 900_000)
	obj := func(kvs ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kvs); i += 2 {
			m[kvs[i].(string)] = kvs[i+1]
		}
		return m
	}
	tests := []struct {
		name string
		set  []kv
		want string // "path: part of the message", the first problem
	}{
		{"10,000 port mappings", []kv{{"request.docker.portMappings", many(10000, func(i int) any { return 1 + i })}}, "request.docker.portMappings: has 10000 entries: at most 1024"},
		{"17 port mappings", []kv{{"request.docker.portMappings", many(17, func(i int) any { return 1 + i })}}, "request.docker.portMappings: has 17 entries: at most 16"},
		{"10,000 env vars", []kv{{"request.docker.environment", env}}, "request.docker.environment: has 10000 variables: at most 256"},
		{"900 KB command", []kv{{"request.docker.command", big}}, "request.docker.command: is 900000 bytes long"},
		{"2000 command words", []kv{{"request.docker.command", strings.Repeat("a ", 2000)}}, "request.docker.command: has 2000 words: at most 1024"},
		{"command list too long", []kv{{"request.docker.command", many(2000, func(int) any { return "a" })}}, "request.docker.command: has 2000 entries"},
		{"900 KB name", []kv{{"name", big}}, "name: is 900000 bytes long"},
		{"257 byte name", []kv{{"name", strings.Repeat("n", 257)}}, "name: is 257 bytes long: at most 256"},
		{"long description", []kv{{"description", strings.Repeat("d", 5000)}}, "description: is 5000 bytes long: at most 4096"},
		{"long image", []kv{{"request.docker.image", strings.Repeat("i", 3000)}}, "request.docker.image: is 3000 bytes long: at most 2048"},
		{"1,000,000 GPUs", []kv{{"request.resources.gpus", 1000000}}, "request.resources.gpus: must be at most 16"},
		{"1000 CPUs", []kv{{"request.resources.cpus", 1000}}, "request.resources.cpus: must be at most 512"},
		{"huge memory", []kv{{"request.resources.cpuMemoryGb", 100000}}, "request.resources.cpuMemoryGb: must be at most 4096"},
		{"100,000 GB tmpfs", []kv{{"request.docker.storage", []any{obj("hostPath", "tmpfs", "containerPath", "/r", "sizeGb", 100000)}}}, "request.docker.storage[0].sizeGb: must be at most 1024"},
		{"tmpfs sum", []kv{{"request.docker.storage", []any{obj("hostPath", "tmpfs", "containerPath", "/r", "sizeGb", 1000), obj("hostPath", "tmpfs", "containerPath", "/s", "sizeGb", 1000)}}}, "request.docker.storage[1].sizeGb: makes the RAM disks 2000 GB"},
		{"33 storage entries", []kv{{"request.docker.storage", many(33, func(i int) any { return fmt.Sprintf("/p%d", i) })}}, "request.docker.storage: has 33 entries: at most 32"},
		{"hostPort 22", []kv{{"request.docker.portMappings", []any{obj("containerPort", 22, "hostPort", 22)}}}, "request.docker.portMappings[0].hostPort: must be within the host port range 30000-32767"},
		{"gpus string", []kv{{"request.resources.gpus", "1"}}, `request.resources.gpus: must be a number, not the string "1"`},
		{"NUL in name", []kv{{"name", "a\x00b"}}, "name: must not contain a NUL character"},
		{"NUL in env value", []kv{{"request.docker.environment", obj("A", "x\x00y")}}, "request.docker.environment.A: must not contain a NUL character"},
		{"env value too long", []kv{{"request.docker.environment", obj("A", strings.Repeat("v", 33<<10))}}, "request.docker.environment.A: is 33792 bytes long"},
		{"env name too long", []kv{{"request.docker.environment", obj(strings.Repeat("N", 300), "v")}}, "request.docker.environment." + strings.Repeat("N", 32) + "…: the name is 300 bytes long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := minimalDoc()
			for _, s := range tt.set {
				doc = set(doc, s.path, s.v)
			}
			got := defaultLimitProblems(t, mustJSON(t, doc))
			path, msg, _ := strings.Cut(tt.want, ": ")
			if got[0].Path != path || !strings.Contains(got[0].Message, msg) {
				t.Errorf("first problem = %q, want path %q and a message containing %q (all: %.500q)", got[0], path, msg, got)
			}
		})
	}
}

// TestLimitsText covers what only raw text can hold: invalid UTF-8, huge numbers, deep nesting,
// duplicate keys, oversized documents.
func TestLimitsText(t *testing.T) {
	doc := func(name string) string {
		return `{"name": ` + name + `, "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1}, "docker": {"image": "debian:stable"}}}`
	}
	tests := []struct {
		name, in, want string
	}{
		{"invalid UTF-8 in a value", doc("\"a\xff\xfeb\""), "name: is not valid UTF-8"},
		{"invalid UTF-8 in a key", `{"name": "n", "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1}, "docker": {"image": "debian:stable", "environment": {"A` + "\xc3" + `": "x"}}}}`, "request.docker.environment: has a key that is not valid UTF-8"},
		{"escaped NUL", doc(`"a\u0000b"`), "name: must not contain a NUL character"},
		{"NUL in a key", `{"name": "n", "request": {"resources": {"cpus": 1, "gpus": 0, "cpuMemoryGb": 1}, "docker": {"image": "debian:stable", "environment": {"A\u0000": "x"}}}}`, "request.docker.environment: has a key that must not contain a NUL"},
		{"huge number", strings.Replace(doc(`"n"`), `"gpus": 0`, `"gpus": 1e999999999`, 1), "request.resources.gpus: must be at most"},
		{"long number", strings.Replace(doc(`"n"`), `"gpus": 0`, `"gpus": `+strings.Repeat("9", 100), 1), "request.resources.gpus: is a number of 100 characters"},
		{"big integer", strings.Replace(doc(`"n"`), `"gpus": 0`, `"gpus": 99999999999`, 1), "request.resources.gpus: must be at most"},
		{"duplicate key", strings.Replace(doc(`"n"`), `"gpus": 0`, `"gpus": 0, "gpus": 8`, 1), "request.resources.gpus: duplicate key"},
		{"deep nesting", doc(`"n"`)[:len(doc(`"n"`))-1] + `, "extra": ` + strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100) + "}", "extra.a.a.a"},
		{"long list", doc(`"n"`)[:len(doc(`"n"`))-1] + `, "extra": {"sshPubKeys": [` + strings.TrimSuffix(strings.Repeat(`"k",`, 2000), ",") + `]}}`, "extra.sshPubKeys: has 2000 entries: at most 1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := defaultLimitProblems(t, []byte(tt.in))
			path, msg, _ := strings.Cut(tt.want, ": ")
			for _, p := range got {
				if strings.HasPrefix(p.Path, path) && strings.Contains(p.Message, msg) {
					return
				}
			}
			t.Errorf("problems = %.600q, want one at %q containing %q", got, path, msg)
		})
	}
	t.Run("document too large", func(t *testing.T) {
		o := testOptions()
		o.Limits.DocumentBytes = 100
		_, err := Parse([]byte(doc(`"`+strings.Repeat("x", 200)+`"`)), o)
		var ve *ValidationError
		if !errors.As(err, &ve) || !strings.Contains(ve.Error(), "larger than the limit of 100 bytes") {
			t.Errorf("Parse = %v", err)
		}
	})
}

// TestLimitsLegacy: version 1 job files keep their numeric strings, and an imec example with
// host port 8080 gets a clear answer naming the field and the range.
func TestLimitsLegacy(t *testing.T) {
	j := mustParse(t, []byte(`{"jobDefinition": {"name": "n", "dockerImage": "x", "clusterId": ["3"], "resources": {"cpuCores": "2", "systemMemory": "1500"}}}`))
	if j.Request.Resources.CPUs != 2 || j.Request.Resources.ClusterID != 3 {
		t.Errorf("resources = %+v", j.Request.Resources)
	}
	got := defaultLimitProblems(t, []byte(`{"jobDefinition": {"name": "n", "dockerImage": "debian:stable", "portMappings": [{"containerPort": 80, "hostPort": 8080}]}}`))
	checkProblems(t, got, "jobDefinition.portMappings[0].hostPort: must be within the host port range 30000-32767 of this cluster, not 8080")
	o := testOptions()
	o.Limits = DefaultLimits()
	if _, err := Parse([]byte(`{"jobDefinition": {"name": "n", "dockerImage": "debian:stable", "portMappings": [{"containerPort": 80, "hostPort": 30080}]}}`), o); err != nil {
		t.Errorf("host port in range: %v", err)
	}
}

func TestParsePortRange(t *testing.T) {
	if lo, hi, err := ParsePortRange("30000-32767"); err != nil || lo != 30000 || hi != 32767 {
		t.Errorf("ParsePortRange = %d, %d, %v", lo, hi, err)
	}
	for _, bad := range []string{"", "1", "5-1", "0-10", "1-70000", "a-b"} {
		if _, _, err := ParsePortRange(bad); err == nil {
			t.Errorf("ParsePortRange(%q) accepted", bad)
		}
	}
}

// TestClientLimits: a client's local check accepts what an operator may allow (host port 8080,
// 64 GPUs) and still refuses what no master accepts (a NUL).
func TestClientLimits(t *testing.T) {
	o := DefaultOptions()
	o.Limits = ClientLimits()
	if _, err := Parse([]byte(`{"jobDefinition": {"name": "n", "dockerImage": "debian:stable", "resources": {"gpus": 64},
		"portMappings": [{"containerPort": 80, "hostPort": 8080}]}}`), o); err != nil {
		t.Errorf("client limits: %v", err)
	}
	if _, err := Parse([]byte(`{"jobDefinition": {"name": "n\u0000", "dockerImage": "debian:stable"}}`), o); err == nil {
		t.Error("client limits accepted a NUL")
	}
}
