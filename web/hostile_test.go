package web_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/protocol"
	"github.com/opengpulab/gpulab/store"
)

// The hostile-input corpus: what careless and malicious users (and a stolen slave certificate)
// sent to a real master, and more. Every request must be answered with a 4xx whose body names
// the field at fault; nothing may be stored; the master must not panic (a panic answers 500)
// and its memory must stay bounded.

// hostileCase is one hostile request.
type hostileCase struct {
	name string
	// as is who sends it: "alice" (a user), "admin", "slave" or "" (no certificate).
	as           string
	method, path string
	body         []byte
	header       []string
	// status is the expected status; 0: any 4xx.
	status int
	// field must appear in the answer's body (the field's path, or the limit named).
	field string
}

// hostileJob is a valid job with change applied to its tree.
func hostileJob(change func(j map[string]any)) []byte {
	j := map[string]any{
		"name": "hostile",
		"request": map[string]any{
			"resources": map[string]any{"cpus": 1, "gpus": 0, "cpuMemoryGb": 1},
			"docker":    map[string]any{"image": "busybox", "command": "true"},
		},
	}
	if change != nil {
		change(j)
	}
	b, err := json.Marshal(j)
	if err != nil {
		panic(err)
	}
	return b
}

func resources(j map[string]any) map[string]any {
	return j["request"].(map[string]any)["resources"].(map[string]any)
}

func docker(j map[string]any) map[string]any {
	return j["request"].(map[string]any)["docker"].(map[string]any)
}

// rawJob is a job document written as text, for what json.Marshal cannot write (invalid UTF-8,
// duplicate keys, huge numbers): gpus, name and extra are inserted as given.
func rawJob(name, gpus, extra string) []byte {
	return []byte(`{"name": ` + name + `, "request": {"resources": {"cpus": 1, "gpus": ` + gpus + `, "cpuMemoryGb": 1}, "docker": {"image": "busybox"` + extra + `}}}`)
}

func hostileCases() []hostileCase {
	const jobs = v31 + "/jobs"
	var cases []hostileCase
	add := func(name string, body []byte, field string) {
		cases = append(cases, hostileCase{name: name, as: "alice", method: "POST", path: jobs, body: body, status: 400, field: field})
	}
	setRes := func(k string, v any) []byte { return hostileJob(func(j map[string]any) { resources(j)[k] = v }) }
	setDocker := func(k string, v any) []byte { return hostileJob(func(j map[string]any) { docker(j)[k] = v }) }
	setTop := func(k string, v any) []byte { return hostileJob(func(j map[string]any) { j[k] = v }) }
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

	// Finding 1: accepted before, now refused.
	add("10,000 port mappings", setDocker("portMappings", many(10000, func(i int) any { return map[string]any{"containerPort": 1 + i%60000} })), "request.docker.portMappings")
	add("10,000 environment variables", setDocker("environment", env), "request.docker.environment")
	add("900 KB command", setDocker("command", big), "request.docker.command")
	add("900 KB name", setTop("name", big), `"name"`)
	add("1,000,000 GPUs", setRes("gpus", 1000000), "request.resources.gpus")
	add("100,000 GB tmpfs", setDocker("storage", []any{map[string]any{"hostPath": "tmpfs", "containerPath": "/r", "sizeGb": 100000}}), "request.docker.storage[0].sizeGb")
	add("hostPort 22", setDocker("portMappings", []any{map[string]any{"containerPort": 22, "hostPort": 22}}), "request.docker.portMappings[0].hostPort")
	add("gpus as a string", setRes("gpus", "1"), "request.resources.gpus")
	add("invalid UTF-8 in the name", rawJob("\"bad\xff\xfe\"", "0", ""), `"name"`)
	add("invalid UTF-8 in the command", rawJob(`"n"`, "0", `, "command": "echo `+"\xc3\x28"+`"`), "request.docker.command")
	add("invalid UTF-8 in an env value", rawJob(`"n"`, "0", `, "environment": {"A": "`+"\xed\xa0\x80"+`"}`), "request.docker.environment.A")
	add("invalid UTF-8 in an env name", rawJob(`"n"`, "0", `, "environment": {"A`+"\xff"+`": "x"}`), "request.docker.environment")
	// Finding 2: a NUL answered 500.
	add("NUL in the name", setTop("name", "a\x00b"), `"name"`)
	add("NUL in an env value", setDocker("environment", map[string]any{"A": "x\x00y"}), "request.docker.environment.A")
	add("NUL in the description", setTop("description", "\x00"), "description")
	add("NUL in the image", setDocker("image", "busybox\x00"), "request.docker.image")
	add("NUL in the command", setDocker("command", []any{"echo", "\x00"}), "request.docker.command[1]")
	add("NUL in an env name", rawJob(`"n"`, "0", `, "environment": {"A\u0000": "x"}`), "request.docker.environment")
	// Resources beyond the largest slave (2 GPUs, 8 CPUs, 16 GB) and beyond the limits.
	add("more GPUs than any slave", setRes("gpus", 3), "request.resources.gpus")
	add("more CPUs than any slave", setRes("cpus", 64), "request.resources.cpus")
	add("more memory than any slave", setRes("cpuMemoryGb", 100), "request.resources.cpuMemoryGb")
	add("tmpfs beyond any slave's memory", setDocker("storage", []any{map[string]any{"hostPath": "tmpfs", "containerPath": "/r", "sizeGb": 500}}), "request.resources.cpuMemoryGb")
	add("cpus beyond the limit", setRes("cpus", 1000), "request.resources.cpus")
	add("memory beyond the limit", setRes("cpuMemoryGb", 100000), "request.resources.cpuMemoryGb")
	add("gpuMemoryGb beyond the limit", setRes("gpuMemoryGb", 100000), "request.resources.gpuMemoryGb")
	add("negative gpus", setRes("gpus", -1), "request.resources.gpus")
	add("zero cpus", setRes("cpus", 0), "request.resources.cpus")
	add("fractional gpus", setRes("gpus", 1.5), "request.resources.gpus")
	add("gpus true", setRes("gpus", true), "request.resources.gpus")
	add("gpus a list", setRes("gpus", []any{1}), "request.resources.gpus")
	add("gpus an object", setRes("gpus", map[string]any{"n": 1}), "request.resources.gpus")
	add("cpus as a string", setRes("cpus", "2"), "request.resources.cpus")
	add("memory as a string", setRes("cpuMemoryGb", "4"), "request.resources.cpuMemoryGb")
	add("gpus missing", hostileJob(func(j map[string]any) { delete(resources(j), "gpus") }), "request.resources.gpus")
	// Huge numbers, deep nesting, duplicate keys, wrong types.
	add("huge exponent", rawJob(`"n"`, "1e999999999", ""), "request.resources.gpus")
	add("100-digit number", rawJob(`"n"`, strings.Repeat("9", 100), ""), "request.resources.gpus")
	add("beyond 32 bits", rawJob(`"n"`, "99999999999", ""), "request.resources.gpus")
	add("huge negative", rawJob(`"n"`, "-1e30", ""), "request.resources.gpus")
	add("tiny fraction", rawJob(`"n"`, "1e-300", ""), "request.resources.gpus")
	add("deeply nested objects", []byte(`{"name": "n", "extra": `+strings.Repeat(`{"a":`, 200)+"1"+strings.Repeat("}", 200)+`}`), "extra.a.a")
	add("deeply nested lists", []byte(`{"name": `+strings.Repeat("[", 5000)+strings.Repeat("]", 5000)+`}`), `"name[0]`)
	add("duplicate key gpus", rawJob(`"n"`, `0, "gpus": 8`, ""), "request.resources.gpus")
	add("duplicate key name", []byte(`{"name": "a", "name": "b", "request": {}}`), `"name"`)
	add("unknown key", setRes("gpu", 1), "request.resources.gpu")
	add("name a number", setTop("name", 5), `"name"`)
	add("name empty", setTop("name", " "), `"name"`)
	add("name 257 bytes", setTop("name", strings.Repeat("n", 257)), `"name"`)
	add("description 5 KB", setTop("description", strings.Repeat("d", 5000)), "description")
	add("image 3 KB", setDocker("image", strings.Repeat("i", 3000)), "request.docker.image")
	add("command of 2000 words", setDocker("command", strings.Repeat("w ", 2000)), "request.docker.command")
	add("command list of 2000 entries", setDocker("command", many(2000, func(int) any { return "w" })), "request.docker.command")
	add("command list of numbers", setDocker("command", []any{1, 2}), "request.docker.command[0]")
	add("env value 40 KB", setDocker("environment", map[string]any{"A": strings.Repeat("v", 40<<10)}), "request.docker.environment.A")
	add("env name 300 bytes", setDocker("environment", map[string]any{strings.Repeat("N", 300): "v"}), "request.docker.environment.NNNN")
	add("env name invalid", setDocker("environment", map[string]any{"1A": "v"}), "request.docker.environment.1A")
	add("env value an object", setDocker("environment", map[string]any{"A": map[string]any{}}), "request.docker.environment.A")
	add("environment a list", setDocker("environment", []any{"A=1"}), "request.docker.environment")
	add("17 port mappings", setDocker("portMappings", many(17, func(i int) any { return 1000 + i })), "request.docker.portMappings")
	add("hostPort 70000", setDocker("portMappings", []any{map[string]any{"containerPort": 80, "hostPort": 70000}}), "request.docker.portMappings[0].hostPort")
	add("hostPort 80", setDocker("portMappings", []any{map[string]any{"containerPort": 80, "hostPort": 80}}), "30000-32767")
	add("hostPort as a word", setDocker("portMappings", []any{map[string]any{"containerPort": 80, "hostPort": "ssh"}}), "request.docker.portMappings[0].hostPort")
	add("containerPort 0", setDocker("portMappings", []any{0}), "request.docker.portMappings[0]")
	add("udp port", setDocker("portMappings", []any{"53/udp"}), "request.docker.portMappings[0]")
	add("portMappings an object", setDocker("portMappings", map[string]any{"80": 80}), "request.docker.portMappings")
	add("33 storage entries", setDocker("storage", many(33, func(i int) any { return fmt.Sprintf("/p%d", i) })), "request.docker.storage")
	add("storage relative path", setDocker("storage", []any{"data"}), "request.docker.storage[0]")
	add("storage on the container root", setDocker("storage", []any{map[string]any{"hostPath": "/p", "containerPath": "/"}}), "request.docker.storage[0].containerPath")
	add("storage with ..", setDocker("storage", []any{"/project/../etc"}), "request.docker.storage[0]")
	add("two RAM disks beyond the limit", setDocker("storage", []any{map[string]any{"hostPath": "tmpfs", "containerPath": "/r", "sizeGb": 1000},
		map[string]any{"hostPath": "tmpfs", "containerPath": "/s", "sizeGb": 1000}}), "request.docker.storage[1].sizeGb")
	add("tmpfs of 0 GB", setDocker("storage", []any{map[string]any{"hostPath": "tmpfs", "containerPath": "/r", "sizeGb": 0}}), "request.docker.storage[0].sizeGb")
	add("workingDir relative", setDocker("workingDir", "tmp"), "request.docker.workingDir")
	add("user with a space", setDocker("user", "root root"), "request.docker.user")
	add("maxDuration forever", hostileJob(func(j map[string]any) {
		j["request"].(map[string]any)["scheduling"] = map[string]any{"maxDuration": "forever"}
	}), "request.scheduling.maxDuration")
	add("notAfter in the past", hostileJob(func(j map[string]any) {
		j["request"].(map[string]any)["scheduling"] = map[string]any{"notAfter": "2001-01-01T00:00:00Z"}
	}), "request.scheduling.notAfter")
	add("reservationId a path", hostileJob(func(j map[string]any) {
		j["request"].(map[string]any)["scheduling"] = map[string]any{"reservationId": "../../x"}
	}), "request.scheduling.reservationId")
	add("email not an address", hostileJob(func(j map[string]any) { j["extra"] = map[string]any{"emailOnEnd": "nobody"} }), "extra.emailOnEnd")
	add("ssh key not a key", hostileJob(func(j map[string]any) { j["extra"] = map[string]any{"sshPubKeys": []any{"rm -rf /"}} }), "extra.sshPubKeys[0]")
	add("unknown feature", setRes("features", []any{"quantum"}), "request.resources.features[0]")
	add("state set by the client", setTop("state", map[string]any{"status": "RUNNING"}), `"state"`)
	add("uuid set by the client", setTop("uuid", "f6dbca7b-58fd-47e3-9ac4-9ad33e7f6030"), `"uuid"`)
	add("a list, not a job", []byte(`[1, 2]`), "JSON object")
	add("not JSON", []byte(`{"name":`), "line 1")
	add("empty body", nil, "empty")
	add("v1 job with host port 8080", []byte(`{"jobDefinition": {"name": "v1", "dockerImage": "busybox", "portMappings": [{"containerPort": 80, "hostPort": 8080}]}}`), "jobDefinition.portMappings[0].hostPort")
	add("v1 job with cpuCores a word", []byte(`{"jobDefinition": {"name": "v1", "dockerImage": "busybox", "resources": {"cpuCores": "many"}}}`), "jobDefinition.resources.cpuCores")
	add("v1 job with NUL", []byte(`{"jobDefinition": {"name": "v1\u0000", "dockerImage": "busybox"}}`), "jobDefinition.name")
	cases = append(cases,
		hostileCase{name: "2 MiB body", as: "alice", method: "POST", path: jobs, body: bytes.Repeat([]byte(" "), 2<<20), status: 413, field: "1048576"},
		hostileCase{name: "convert with NUL", method: "POST", path: v31 + "/convert", body: setTop("name", "\x00"), status: 400, field: `"name"`},
		hostileCase{name: "hold not a boolean", as: "alice", method: "POST", path: jobs + "?hold=perhaps", body: hostileJob(nil), status: 400, field: "hold"},
		hostileCase{name: "Idempotency-Key too long", as: "alice", method: "POST", path: jobs, body: hostileJob(nil), header: []string{"Idempotency-Key", strings.Repeat("k", 200)}, status: 400, field: "Idempotency-Key"},
		hostileCase{name: "status not settable", as: "alice", method: "PUT", path: jobs + "/f6dbca7b-58fd-47e3-9ac4-9ad33e7f6030/state/status", body: []byte("RUNNING"), status: 400, field: "status"},
		hostileCase{name: "status body too large", as: "alice", method: "PUT", path: jobs + "/f6dbca7b-58fd-47e3-9ac4-9ad33e7f6030/state/status", body: bytes.Repeat([]byte("x"), 5000), status: 413, field: "1024"},
	)

	// Query strings.
	get := func(name, query, field string) {
		cases = append(cases, hostileCase{name: name, as: "alice", method: "GET", path: jobs + "?" + query, status: 400, field: field})
	}
	get("page negative", "page=-1", "page")
	get("page_size a word", "page_size=abc", "page_size")
	get("cluster_id a word", "cluster_id=x", "cluster_id")
	get("interactive maybe", "interactive=maybe", "interactive")
	get("max_hours huge", "max_hours=99999999999999999999", "max_hours")
	get("100 parameters", strings.Repeat("a=1&", 99)+"a=1", "query")
	get("10 KB query", "x="+strings.Repeat("q", 10<<10), "query")
	get("NUL in a parameter", "name=%00", "name")
	get("invalid UTF-8 in a parameter", "x=%ff%fe", `"x`)
	get("bad escape", "x=%zz", "query")
	get("page beyond 64 bits of offset", "page=9223372036854775807", "page")
	get("max_hours beyond a duration", "max_hours=9223372036854775807", "max_hours")
	get("max_hours of a million years", "max_hours=8760000000", "max_hours")
	get("allowed_states unknown", "allowed_states=RUNNING,BOGUS", "allowed_states")
	get("reservation_id not a UUID", "reservation_id=../../x", "reservation_id")
	get("assigned_slave_name 10 KB", "assigned_slave_name="+strings.Repeat("s", 7<<10), "assigned_slave_name")
	cases = append(cases,
		hostileCase{name: "delete reservation not a UUID", as: "admin", method: "DELETE", path: v31 + "/reservations/..%2Fx", status: 400, field: `"id"`},
		hostileCase{name: "job log offset negative", as: "alice", method: "GET", path: jobs + "/f6dbca7b-58fd-47e3-9ac4-9ad33e7f6030/log?offset=-1", status: 0, field: ""},
		hostileCase{name: "usage with junk", as: "alice", method: "GET", path: v31 + "/usage?user=%ff", status: 400, field: "user"},
		hostileCase{name: "admin user id not a number", as: "admin", method: "POST", path: "/admin/users/x/admin", body: []byte("admin=true"),
			header: []string{"Content-Type", "application/x-www-form-urlencoded", "Accept", "application/json"}, status: 0, field: ""},
		hostileCase{name: "admin project members of project x", as: "admin", method: "POST", path: "/admin/projects/x/members", body: []byte("user=alice"),
			header: []string{"Content-Type", "application/x-www-form-urlencoded", "Accept", "application/json"}, status: 0, field: ""},
		hostileCase{name: "admin slave unknown", as: "admin", method: "POST", path: "/admin/slaves/nope/accepting", body: []byte("accepting=true"),
			header: []string{"Content-Type", "application/x-www-form-urlencoded", "Accept", "application/json"}, status: 0, field: ""},
		hostileCase{name: "admin cluster id huge", as: "admin", method: "POST", path: "/admin/clusters", body: []byte("id=99999999999999999999&name=x"),
			header: []string{"Content-Type", "application/x-www-form-urlencoded", "Accept", "application/json"}, status: 400, field: "id"},
		hostileCase{name: "job action unknown", as: "alice", method: "POST", path: "/jobs/f6dbca7b-58fd-47e3-9ac4-9ad33e7f6030/explode", body: []byte("x=1"),
			header: []string{"Content-Type", "application/x-www-form-urlencoded", "Accept", "application/json"}, status: 0, field: ""},
	)
	cases = append(cases,
		hostileCase{name: "headers of 100 KiB", as: "alice", method: "GET", path: jobs, header: []string{"X-Big", strings.Repeat("h", 100<<10)}, status: 431, field: "Header"},
		hostileCase{name: "NUL in a job id", as: "alice", method: "GET", path: jobs + "/abc%00def", status: 400, field: "path"},
		hostileCase{name: "invalid UTF-8 in a job id", as: "alice", method: "GET", path: jobs + "/%ff%fe%fd%fc%fb%fa", status: 400, field: "path"},
		hostileCase{name: "job id a path", as: "alice", method: "GET", path: jobs + "/..%2F..%2Fx", status: 400, field: "id"},
		hostileCase{name: "NUL in a reservation id", as: "admin", method: "DELETE", path: v31 + "/reservations/r%00", status: 400, field: "path"},
		hostileCase{name: "NUL in a slave name", as: "admin", method: "POST", path: "/admin/slaves/s%00/accepting", status: 400, field: "path"},
	)
	// Portal forms, posted as a script with a client certificate would.
	form := func(name, path, body, field string) {
		cases = append(cases, hostileCase{name: "form: " + name, as: "alice", method: "POST", path: path, body: []byte(body),
			header: []string{"Content-Type", "application/x-www-form-urlencoded", "Accept", "application/json"}, status: 400, field: field})
	}
	form("ssh key name with NUL", "/profile/ssh-keys", "name=k%00&public_key=ssh-ed25519+AAAA", "name")
	form("ssh key invalid UTF-8", "/profile/ssh-keys", "name=k&public_key=%ff", "public_key")
	form("job form name with NUL", "/jobs/new", "name=a%00&image=busybox&cpus=1&gpus=0&cpuMemoryGb=1", "name")
	form("job form JSON with NUL", "/jobs/new", "json="+url.QueryEscape(string(hostileJob(func(j map[string]any) { j["name"] = "a\x00" }))), "name")
	form("job form JSON with 10,000 port mappings", "/jobs/new", "json="+url.QueryEscape(string(setDocker("portMappings", many(10000, func(i int) any { return 1 + i%60000 })))), "portMappings")
	cases = append(cases, hostileCase{name: "form: 3 MiB", as: "alice", method: "POST", path: "/profile/ssh-keys", body: bytes.Repeat([]byte("a"), 3<<20),
		header: []string{"Content-Type", "application/x-www-form-urlencoded", "Accept", "application/json"}, status: 413, field: "2097152"})

	// Reservations (an admin's, so that validation is reached).
	res := func(change func(r map[string]any)) []byte {
		r := map[string]any{"name": "r", "clusterId": 1, "gpus": 1, "start": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
			"end": time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339), "users": []any{"alice"}}
		change(r)
		b, _ := json.Marshal(r)
		return b
	}
	addRes := func(name string, body []byte, status int, field string) {
		cases = append(cases, hostileCase{name: "reservation: " + name, as: "admin", method: "POST", path: v31 + "/reservations", body: body, status: status, field: field})
	}
	addRes("NUL in the name", res(func(r map[string]any) { r["name"] = "r\x00" }), 400, `"name`)
	addRes("gpus a string", res(func(r map[string]any) { r["gpus"] = "2" }), 400, "gpus")
	addRes("start not a time", res(func(r map[string]any) { r["start"] = "yesterday" }), 400, "start")
	addRes("2000 users", res(func(r map[string]any) { r["users"] = many(2000, func(i int) any { return fmt.Sprint("u", i) }) }), 400, "users")
	addRes("negative clusterId", res(func(r map[string]any) { r["clusterId"] = -1 }), 400, "clusterId")
	addRes("end before start", res(func(r map[string]any) { r["end"] = "2001-01-01T00:00:00Z" }), 400, "end")
	addRes("gpus beyond the limit", res(func(r map[string]any) { r["gpus"] = 1 << 30 }), 400, "gpus")
	addRes("unknown user", res(func(r map[string]any) { r["users"] = []any{"mallory"} }), 400, "users")
	addRes("name 1000 bytes", res(func(r map[string]any) { r["name"] = strings.Repeat("r", 1000) }), 400, `"name`)
	addRes("duplicate key", []byte(`{"name": "a", "name": "b"}`), 400, `"name"`)
	addRes("invalid UTF-8 in slaveNames", []byte(`{"name": "a", "slaveNames": ["`+"\xff"+`"]}`), 400, "slaveNames[0]")
	addRes("deep nesting", []byte(`{"name": `+strings.Repeat("[", 100)+strings.Repeat("]", 100)+`}`), 400, `"name[0]`)
	addRes("body of 100 KB", res(func(r map[string]any) { r["name"] = strings.Repeat("r", 100<<10) }), 413, "65536")
	addRes("users not a list", res(func(r map[string]any) { r["users"] = "alice" }), 400, "users")

	// The slave protocol, with a slave certificate (finding 2: jobUuid "../../x" answered 500).
	const someJob = "f6dbca7b-58fd-47e3-9ac4-9ad33e7f6030"
	addProto := func(name, path string, msg any, status int, field string) {
		var body []byte
		switch m := msg.(type) {
		case []byte:
			body = m
		case string:
			body = []byte(m)
		default:
			body, _ = json.Marshal(m)
		}
		cases = append(cases, hostileCase{name: "slave: " + name, as: "slave", method: "POST", path: path, body: body, status: status, field: field})
	}
	update := func(change func(u map[string]any)) map[string]any {
		u := map[string]any{"jobUuid": someJob, "attempt": 1, "from": "ASSIGNED", "to": "STARTING"}
		change(u)
		return u
	}
	addProto("update jobUuid ../../x", protocol.UpdatePath, update(func(u map[string]any) { u["jobUuid"] = "../../x" }), 400, "jobUuid")
	addProto("update jobUuid with NUL", protocol.UpdatePath, update(func(u map[string]any) { u["jobUuid"] = someJob[:35] + "\x00" }), 400, "jobUuid")
	addProto("update jobUuid in braces", protocol.UpdatePath, update(func(u map[string]any) { u["jobUuid"] = "{" + someJob + "}" }), 400, "jobUuid")
	addProto("update reason 5 KB", protocol.UpdatePath, update(func(u map[string]any) { u["reason"] = strings.Repeat("r", 5000) }), 400, "reason")
	addProto("update from unknown", protocol.UpdatePath, update(func(u map[string]any) { u["from"] = "BOGUS" }), 400, "from")
	addProto("update attempt a string", protocol.UpdatePath, update(func(u map[string]any) { u["attempt"] = "1" }), 400, "attempt")
	addProto("update attempt negative", protocol.UpdatePath, update(func(u map[string]any) { u["attempt"] = -1 }), 400, "attempt")
	addProto("update 1000 port mappings", protocol.UpdatePath, update(func(u map[string]any) {
		u["resources"] = map[string]any{"portMappings": many(1000, func(i int) any { return map[string]any{"containerPort": 1 + i, "hostPort": 30000 + i} })}
	}), 400, "resources.portMappings")
	addProto("update duplicate key", protocol.UpdatePath, `{"jobUuid": "`+someJob+`", "jobUuid": "../x"}`, 400, "jobUuid")
	running := func(n int, id string) []any {
		return many(n, func(int) any { return map[string]any{"jobUuid": id, "attempt": 1, "status": "RUNNING"} })
	}
	addProto("heartbeat with 1001 jobs", protocol.HeartbeatPath, map[string]any{"instanceId": "i1", "jobs": running(1001, someJob)}, 400, `"jobs"`)
	addProto("heartbeat job ../x", protocol.HeartbeatPath, map[string]any{"instanceId": "i1", "jobs": running(1, "../x")}, 400, "jobs[0].jobUuid")
	addProto("heartbeat instanceId NUL", protocol.HeartbeatPath, map[string]any{"instanceId": "i\x00"}, 400, "instanceId")
	addProto("heartbeat usage negative", protocol.HeartbeatPath, map[string]any{"instanceId": "i1", "jobs": []any{map[string]any{"jobUuid": someJob, "attempt": 1,
		"usage": map[string]any{"cpuPercent": -5}}}}, 400, "jobs[0].usage.cpuPercent")
	addProto("heartbeat jobs not a list", protocol.HeartbeatPath, map[string]any{"instanceId": "i1", "jobs": "all"}, 400, "jobs")
	inv := func(change func(i map[string]any)) map[string]any {
		i := map[string]any{"instanceId": "i2", "cpus": 8, "memoryMiB": 16384}
		change(i)
		return i
	}
	addProto("register 65 GPUs", protocol.RegisterPath, inv(func(i map[string]any) {
		i["gpus"] = many(65, func(n int) any { return map[string]any{"index": n, "uuid": fmt.Sprint("GPU-", n), "model": "Fake"} })
	}), 400, "gpus")
	addProto("register negative cpus", protocol.RegisterPath, inv(func(i map[string]any) { i["cpus"] = -1 }), 400, "cpus")
	addProto("register a million cpus", protocol.RegisterPath, inv(func(i map[string]any) { i["cpus"] = 1000000 }), 400, "cpus")
	addProto("register memory beyond int64", protocol.RegisterPath, `{"instanceId": "i2", "memoryMiB": 1e30}`, 400, "memoryMiB")
	addProto("register instanceId invalid UTF-8", protocol.RegisterPath, "{\"instanceId\": \"\xff\"}", 400, "instanceId")
	addProto("register GPU model with NUL", protocol.RegisterPath, inv(func(i map[string]any) {
		i["gpus"] = []any{map[string]any{"index": 0, "uuid": "GPU-0", "model": "V100\x00"}}
	}), 400, "gpus[0].model")
	addProto("register container ../x", protocol.RegisterPath, inv(func(i map[string]any) { i["containers"] = running(1, "../x") }), 400, "containers[0].jobUuid")
	addProto("log chunk over 1 MiB", protocol.LogPath, map[string]any{"jobUuid": someJob, "attempt": 1, "seq": 0,
		"data": base64.StdEncoding.EncodeToString(make([]byte, 1<<20+1))}, 400, "data")
	addProto("log chunk seq negative", protocol.LogPath, map[string]any{"jobUuid": someJob, "attempt": 1, "seq": -1}, 400, "seq")
	addProto("log chunk ../../x", protocol.LogPath, map[string]any{"jobUuid": "../../x", "attempt": 1}, 400, "jobUuid")
	addProto("log chunk data not base64", protocol.LogPath, map[string]any{"jobUuid": someJob, "attempt": 1, "data": "***"}, 400, "invalid")
	addProto("logstate x", protocol.LogStatePath, map[string]any{"jobUuid": "x"}, 400, "jobUuid")
	addProto("done to RUNNING", protocol.DonePath, map[string]any{"jobUuid": someJob, "attempt": 1, "from": "RUNNING", "to": "RUNNING"}, 400, "to")
	addProto("done usage negative memory", protocol.DonePath, map[string]any{"jobUuid": someJob, "attempt": 1, "from": "RUNNING", "to": "FINISHED",
		"usage": map[string]any{"memoryMiB": -1}}, 400, "usage.memoryMiB")
	addProto("next wait a word", protocol.NextPath, map[string]any{"instanceId": "i1", "wait": "forever"}, 400, "wait")
	addProto("next job status unknown", protocol.NextPath, map[string]any{"instanceId": "i1", "jobs": []any{map[string]any{"jobUuid": someJob, "attempt": 1, "status": "BOGUS"}}}, 400, "jobs[0].status")
	addProto("body of 5 MiB", protocol.HeartbeatPath, bytes.Repeat([]byte(" "), 5<<20), 413, "4194304")
	addProto("not JSON", protocol.HeartbeatPath, "{", 400, "JSON")
	cases = append(cases, hostileCase{name: "slave: join token with NUL", method: "POST", path: protocol.JoinPath, body: []byte(`{"token": "t\u0000"}`), status: 400, field: "token"})
	return cases
}

// memFigures are the test process's (the in-process master's) heap after a GC and its RSS.
func memFigures(t *testing.T) (heap, rss uint64) {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	status, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				rss = kb << 10
			}
		}
	}
	return ms.HeapAlloc, rss
}

func TestHostileInput(t *testing.T) {
	m := testmaster.Start(t, testmaster.Options{})
	alice := m.AddUser("alice", false, "", "vision")
	admin := m.AddUser("root", true, "", "vision")
	slaveCert := m.SlaveCert("hostile1", 1)
	ctx := context.Background()
	// The largest slave: 2 GPUs, 8 CPUs, 16 GB; jobs asking for more are refused at submit.
	sc := newSlaveClient(t, m, slaveCert)
	if _, err := sc.Register(ctx, protocol.Inventory{InstanceID: "i1", CPUs: 8, MemoryMiB: 16384,
		GPUs: []protocol.GPU{{Index: 0, UUID: "GPU-a", Model: "Fake V100"}, {Index: 1, UUID: "GPU-b", Model: "Fake V100"}}}); err != nil {
		t.Fatal(err)
	}
	clients := map[string]*http.Client{"": m.Client(nil), "alice": m.Client(&alice.TLS), "admin": m.Client(&admin.TLS), "slave": m.Client(&slaveCert)}

	// A valid job is accepted (the corpus is refused for what it holds, not for its shape).
	if status, body, _ := m.Do(alice, "POST", v31+"/jobs", bytes.NewReader(hostileJob(nil))); status != http.StatusCreated {
		t.Fatalf("valid job: %d %s", status, body)
	}
	jobsBefore, resBefore := countStored(t, m.Store)
	heapBefore, rssBefore := memFigures(t)

	cases := hostileCases()
	if len(cases) < 80 {
		t.Fatalf("only %d cases", len(cases))
	}
	fourxx := 0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, m.URL+tc.path, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+1 < len(tc.header); i += 2 {
				req.Header.Set(tc.header[i], tc.header[i+1])
			}
			resp, err := clients[tc.as].Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.method, tc.path, err)
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			_ = resp.Body.Close()
			if resp.StatusCode >= 400 && resp.StatusCode < 500 {
				fourxx++
			}
			if tc.status != 0 && resp.StatusCode != tc.status || resp.StatusCode < 400 || resp.StatusCode >= 500 {
				t.Fatalf("status %d, want %d: %.600s", resp.StatusCode, tc.status, body)
			}
			if !bytes.Contains(body, []byte(tc.field)) {
				t.Errorf("the answer does not name %s: %.600s", tc.field, body)
			}
		})
	}

	jobsAfter, resAfter := countStored(t, m.Store)
	heapAfter, rssAfter := memFigures(t)
	t.Logf("hostile corpus: %d cases, %d answered 4xx; jobs before %d after %d; reservations before %d after %d; heap before %d KiB after %d KiB; RSS before %d KiB after %d KiB",
		len(cases), fourxx, jobsBefore, jobsAfter, resBefore, resAfter, heapBefore>>10, heapAfter>>10, rssBefore>>10, rssAfter>>10)
	if fourxx != len(cases) {
		t.Errorf("%d of %d cases answered 4xx", fourxx, len(cases))
	}
	if jobsAfter != jobsBefore || resAfter != resBefore {
		t.Errorf("stored: jobs %d → %d, reservations %d → %d", jobsBefore, jobsAfter, resBefore, resAfter)
	}
	// The corpus sends about 30 MB in all; what the master keeps of it must be far less.
	if heapAfter > heapBefore+64<<20 {
		t.Errorf("heap grew from %d KiB to %d KiB", heapBefore>>10, heapAfter>>10)
	}
	if rssAfter > rssBefore+512<<20 {
		t.Errorf("RSS grew from %d KiB to %d KiB", rssBefore>>10, rssAfter>>10)
	}
}

// countStored counts the jobs (any state) and reservations in the master's database.
func countStored(t *testing.T, st *store.Store) (jobs, reservations int) {
	t.Helper()
	ctx := context.Background()
	counts, err := st.CountJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range counts {
		jobs += n
	}
	res, err := st.ListReservations(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return jobs, len(res)
}

func newSlaveClient(t *testing.T, m *testmaster.Master, cert tls.Certificate) *protocol.Client {
	t.Helper()
	caPEM, err := os.ReadFile(m.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := protocol.NewClient(m.URL, caPEM, &cert)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSubmitWithinLargestSlave: without slaves only the static limits apply; with slaves a job
// asking for more than the largest one has is refused at submit, naming the field; a slave that
// joins counts at once.
func TestSubmitWithinLargestSlave(t *testing.T) {
	m := testmaster.Start(t, testmaster.Options{})
	alice := m.AddUser("alice", false, "", "vision")
	ctx := context.Background()
	gpus := func(n int) []byte {
		return hostileJob(func(j map[string]any) { resources(j)["gpus"] = n })
	}
	if status, body, _ := m.Do(alice, "POST", v31+"/jobs", bytes.NewReader(gpus(8))); status != http.StatusCreated {
		t.Fatalf("8 GPUs without slaves: %d %s", status, body)
	}
	small := newSlaveClient(t, m, m.SlaveCert("small1", 1))
	if _, err := small.Register(ctx, protocol.Inventory{InstanceID: "i1", CPUs: 4, MemoryMiB: 8192,
		GPUs: []protocol.GPU{{Index: 0, UUID: "GPU-s", Model: "Fake"}}}); err != nil {
		t.Fatal(err)
	}
	status, body, _ := m.Do(alice, "POST", v31+"/jobs", bytes.NewReader(gpus(2)))
	if status != http.StatusBadRequest || !bytes.Contains(body, []byte("request.resources.gpus")) {
		t.Fatalf("2 GPUs with a 1-GPU slave: %d %s", status, body)
	}
	big := newSlaveClient(t, m, m.SlaveCert("big1", 1))
	if _, err := big.Register(ctx, protocol.Inventory{InstanceID: "i1", CPUs: 4, MemoryMiB: 8192,
		GPUs: []protocol.GPU{{Index: 0, UUID: "GPU-b0", Model: "Fake"}, {Index: 1, UUID: "GPU-b1", Model: "Fake"}}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute) // guards the test only: the recheck is at most a second old
	for {
		status, body, _ = m.Do(alice, "POST", v31+"/jobs", bytes.NewReader(gpus(2)))
		if status == http.StatusCreated {
			break
		}
		if status != http.StatusBadRequest || time.Now().After(deadline) {
			t.Fatalf("2 GPUs after a 2-GPU slave joined: %d %s", status, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
