package metrics

import "testing"

func TestDockerCallLabelsStayBounded(t *testing.T) {
	cases := map[[2]string]string{
		{"GET", "/_ping"}:                                   "GET _ping",
		{"GET", "/v1.47/containers/json"}:                   "GET containers/json",
		{"POST", "/v1.47/containers/create"}:                "POST containers/create",
		{"POST", "/v1.47/containers/3f2a9c/start"}:          "POST containers/{id}/start",
		{"GET", "/v1.47/containers/3f2a9c/json"}:            "GET containers/{id}/json",
		{"DELETE", "/v1.47/containers/3f2a9c"}:              "DELETE containers/{id}",
		{"GET", "/v1.47/images/registry:5000/a/b:1.0/json"}: "GET images/{name}/json",
		{"POST", "/v1.47/images/create"}:                    "POST images/create",
		{"POST", "/v1.47/exec/abc/start"}:                   "POST exec/{id}/start",
		{"GET", "/"}:                                        "GET /",
	}
	for in, want := range cases {
		if got := DockerCall(in[0], in[1]); got != want {
			t.Errorf("DockerCall(%s %s) = %q, want %q", in[0], in[1], got, want)
		}
	}
	if got := MasterCall("POST", "/api/slave/v1/heartbeat"); got != "heartbeat" {
		t.Errorf("MasterCall = %q", got)
	}
}
