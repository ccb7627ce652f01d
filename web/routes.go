package web

import (
	"net/http"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/protocol"
)

// Route is one entry of the route table. Public routes answer without credentials; all others
// get 401 from their handler when the request carries none.
type Route struct {
	Method  string
	Path    string // below the API base, e.g. "jobs/{id}"
	Public  bool
	Handler handlers.Func
}

// APIRoutes is the route table of the JSON API, served under every version in
// handlers.APIVersions. The OpenAPI document is checked against it by a test.
func APIRoutes(h *handlers.Handlers) []Route {
	return []Route{
		{"GET", "version", true, h.Version},
		{"POST", "jobs", false, h.SubmitJob},
		{"GET", "jobs", false, h.ListJobs},
		{"GET", "jobs/{id}", false, h.GetJob},
		{"PUT", "jobs/{id}/state/status", false, h.SetJobStatus},
		{"DELETE", "jobs/{id}", false, h.DeleteJob},
		{"GET", "jobs/{id}/debug", false, h.JobEvents},
		{"GET", "jobs/{id}/log", false, h.JobLog},
		{"POST", "convert", true, h.Convert},
		{"GET", "clusters", true, h.Clusters},
		{"GET", "slaves", true, h.Slaves},
	}
}

// SlaveRoutes is the route table of the slave protocol (package protocol), below the root.
func SlaveRoutes(h *handlers.Handlers) []Route {
	return []Route{
		{"POST", protocol.JoinPath, true, h.SlaveJoin},
		{"POST", protocol.RegisterPath, false, h.SlaveRegister},
		{"POST", protocol.HeartbeatPath, false, h.SlaveHeartbeat},
		{"POST", protocol.NextPath, false, h.SlaveNext},
		{"POST", protocol.UpdatePath, false, h.SlaveUpdate},
		{"POST", protocol.LogPath, false, h.SlaveLog},
		{"POST", protocol.LogStatePath, false, h.SlaveLogState},
		{"POST", protocol.DonePath, false, h.SlaveDone},
	}
}

// routes builds the server's handler: the API under each version, the OpenAPI document and
// health checks, each behind the middleware its group needs.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, v := range handlers.APIVersions {
		for _, rt := range APIRoutes(s.h) {
			version := v
			fn := s.h.Wrap(rt.Handler)
			mux.Handle(rt.Method+" /api/gpulab/"+v+"/"+rt.Path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fn(w, r.WithContext(handlers.WithAPIVersion(r.Context(), version)))
			}))
		}
	}
	for _, rt := range SlaveRoutes(s.h) {
		mux.Handle(rt.Method+" "+rt.Path, s.h.Wrap(rt.Handler))
	}
	mux.Handle("GET /api/gpulab/openapi.json", s.h.Wrap(s.h.OpenAPI))
	mux.Handle("/api/", s.h.Wrap(func(w http.ResponseWriter, r *http.Request) error {
		return &handlers.Error{Status: http.StatusNotFound, Message: "no API endpoint " + r.Method + " " + r.URL.Path}
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", s.ready)
	return s.recoverer(s.logRequests(s.authenticate(mux)))
}
