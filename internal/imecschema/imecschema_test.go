package imecschema

import (
	"encoding/json"
	"strings"
	"testing"
)

// validJob is a running job as imec's server writes it.
const validJob = `{
  "uuid": "0b4c3a9e-1111-4222-8333-444455556666", "name": "train",
  "request": {
    "resources": {"cpus": 1, "gpus": 1, "cpuMemoryGb": 2},
    "docker": {"image": "debian:stable", "command": "sleep 1", "storage": [{"hostPath": "tmpfs", "containerPath": "/t", "sizeGb": 1}, {"containerPath": "/project"}],
      "portMappings": [{"containerPort": 80}]},
    "scheduling": {"minDuration": "5 minutes", "maxDuration": "1 hour"},
    "extra": {"emailOnEnd": ["alice@example.org"]}
  },
  "state": {
    "status": "RUNNING",
    "scheduling": {"queuedExplanations": [], "haltEvents": [{"reason": "SCORE", "time": "2026-05-01T10:00:00Z", "startedJobUuids": ["a"], "haltedJobUuids": ["b"],
      "slaveName": "s1", "slaveInstance": "i1", "startedJobScores": [1], "haltedJobScores": [2]}]},
    "eventTimes": {"created": "2026-05-01T10:00:00Z", "statusUpdated": "2026-05-01T10:01:00Z", "RUNNING": "2026-05-01T10:01:00Z"},
    "resources": {"clusterId": 1, "gpuIds": [0], "cpuIds": [0], "cpuMemoryGb": 2, "gpuMemoryGb": 32, "slaveName": "s1", "slaveHost": "h",
      "slaveInstanceId": "i1", "slaveInstancePid": 12, "workerId": 0, "portMappings": [{"containerPort": 80, "hostPort": 32768}],
      "gpuDetails": {"cudaVersionFull": "12.4", "cudaVersionInt": 12040, "cudaVersionMajor": 12, "cudaVersionMinor": 4, "driverVersion": "550", "nvmlVersion": "12.550",
        "gpus": [{"index": 0, "uuid": "GPU-1", "serial": "N/A", "name": "V100", "brand": "Tesla", "minorNumber": 0, "boardId": 0, "bridgeChipInfo": "N/A",
          "isMultiGpuBoard": false, "maxPcieLinkGeneration": 3, "maxPcieLinkWidth": 16, "vbiosVersion": "N/A"}]}},
    "finalUsageStatistics": {"containerStatistics": {"firstTime": "2026-05-01T10:01:00Z", "lastTime": "2026-05-01T10:02:00Z", "aggPeriodNs": 60000000000,
      "cpuCount": 1, "cpuUsage": 0.5, "cpuUsageTotalNs": 1, "cpuUsageKernelmodeNs": -1, "cpuUsageUsermodeNs": -1, "maxPidCount": -1, "memLimitByte": 1,
      "memUsageByte": 1, "memMaxUsageByte": -1, "networkRxByte": -1, "networkTxByte": -1},
      "gpuStatistics": {"gpuCount": 1, "averageUtilization": 0.5, "averageMemUtilization": 0.1}}
  },
  "restartInfo": {"initialJobUuid": "0b4c3a9e-1111-4222-8333-444455556666", "restartCount": 0},
  "owner": {"userUrn": "urn:publicid:IDN+example.org+user+alice", "userEmail": "alice@example.org", "projectUrn": "urn:publicid:IDN+example.org+project+vision"}
}`

// TestJobSchemaRefusesWhatImecRefuses: the differences issue 11 found between our old v4.0
// answer and imec's model each fail the schema, as they failed imec's client.
func TestJobSchemaRefusesWhatImecRefuses(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate("job.json#/$defs/Job", []byte(validJob)); err != nil {
		t.Fatalf("imec's own shape refused: %v", err)
	}
	cases := []struct {
		name string
		edit func(j map[string]any)
		want string // in the error
	}{
		{"created at the state level", func(j map[string]any) { state(j)["created"] = "2026-05-01T10:00:00Z" }, "created"},
		{"ONHOLD event time", func(j map[string]any) { obj(state(j), "eventTimes")["ONHOLD"] = "2026-05-01T10:00:00Z" }, "ONHOLD"},
		{"no statusUpdated", func(j map[string]any) { delete(obj(state(j), "eventTimes"), "statusUpdated") }, "statusUpdated"},
		{"time without offset", func(j map[string]any) { obj(state(j), "eventTimes")["created"] = "2026-05-01T10:00:00" }, "date-time"},
		{"portMappings null", func(j map[string]any) { obj(state(j), "resources")["portMappings"] = nil }, "portMappings"},
		{"gpuDetails a list", func(j map[string]any) { obj(state(j), "resources")["gpuDetails"] = []any{} }, "gpuDetails"},
		{"exitCode", func(j map[string]any) { obj(state(j), "resources")["exitCode"] = 0 }, "exitCode"},
		{"no gpuMemoryGb", func(j map[string]any) { delete(obj(state(j), "resources"), "gpuMemoryGb") }, "gpuMemoryGb"},
		{"no slaveInstancePid", func(j map[string]any) { delete(obj(state(j), "resources"), "slaveInstancePid") }, "slaveInstancePid"},
		{"no workerId", func(j map[string]any) { delete(obj(state(j), "resources"), "workerId") }, "workerId"},
		{"estimatedStart", func(j map[string]any) { obj(state(j), "scheduling")["estimatedStart"] = "2026-05-01T10:00:00Z" }, "estimatedStart"},
		{"our halt event", func(j map[string]any) {
			obj(state(j), "scheduling")["haltEvents"] = []any{map[string]any{"time": "2026-05-01T10:00:00Z", "reason": "SCORE", "haltedJobs": []any{"x"}}}
		}, "haltEvents"},
		{"our usage sample", func(j map[string]any) {
			state(j)["finalUsageStatistics"] = map[string]any{"cpuPercent": 50, "memoryMiB": 10}
		}, "finalUsageStatistics"},
		{"unknown status", func(j map[string]any) { state(j)["status"] = "WAITING" }, "status"},
		{"sanitized project as a user URN", func(j map[string]any) { obj(j, "owner")["projectUrn"] = "urn:publicid:IDN+hidden+user+hidden" }, "projectUrn"},
		{"no e-mail", func(j map[string]any) { delete(obj(j, "owner"), "userEmail") }, "userEmail"},
		{"sizeGb on a bind mount", func(j map[string]any) {
			obj(obj(j, "request"), "docker")["storage"] = []any{map[string]any{"hostPath": "/a", "containerPath": "/a", "sizeGb": 1}}
		}, "storage"},
		{"no maxDuration", func(j map[string]any) { delete(obj(obj(j, "request"), "scheduling"), "maxDuration") }, "maxDuration"},
		{"unknown top-level field", func(j map[string]any) { j["queuedExplanations"] = []any{} }, "queuedExplanations"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var j map[string]any
			if err := json.Unmarshal([]byte(validJob), &j); err != nil {
				t.Fatal(err)
			}
			c.edit(j)
			data, _ := json.Marshal(j)
			err := s.Validate("job.json#/$defs/Job", data)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one naming %q", err, c.want)
			}
		})
	}
	if err := s.Validate("job.json#/$defs/JobList", []byte(`[`+validJob+`]`)); err == nil {
		t.Errorf("a bare list passes as GET jobs (imec's client reads ['items'])")
	}
	if err := s.Validate("job.json#/$defs/JobList", []byte(`{"items": [`+validJob+`], "page": 1}`)); err != nil {
		t.Errorf("GET jobs with items: %v", err)
	}
}

func obj(m map[string]any, k string) map[string]any { return m[k].(map[string]any) }
func state(j map[string]any) map[string]any         { return obj(j, "state") }
