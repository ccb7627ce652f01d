package web

import (
	"net/http"

	"github.com/opengpulab/gpulab/handlers"
	"github.com/opengpulab/gpulab/static"
)

// PortalRoutes is the route table of the portal's pages (full paths from the root). pageRoutes
// serves it behind the login redirect and the CSRF check. GETs are pages (JSON with `Accept:
// application/json`, a partial with `HX-Request`); every POST is a form that changes state,
// carrying the CSRF token. The static files are public: the login page uses the stylesheet.
func PortalRoutes(h *handlers.Handlers) []Route {
	p := h.Page
	return []Route{
		{"GET", static.Prefix + "{file...}", true, serveStatic},
		{"GET", "/{$}", false, h.Home},

		{"GET", "/jobs", false, p(h.JobsPage)},
		{"GET", "/jobs/new", false, p(h.NewJobPage)},
		{"POST", "/jobs/new", false, p(h.NewJobForm)},
		{"GET", "/jobs/{id}", false, p(h.JobPage)},
		{"GET", "/jobs/{id}/log", false, p(h.JobLogPage)},
		{"POST", "/jobs/{id}/{action}", false, p(h.JobAction)},

		{"GET", "/live/slaves", false, p(h.SlavesPage)},
		{"GET", "/live/clusters", false, p(h.ClustersPage)},

		{"GET", "/reservations", false, p(h.ReservationsPage)},
		{"POST", "/reservations", false, p(h.CreateReservationForm)},
		{"POST", "/reservations/{rid}/delete", false, p(h.DeleteReservationForm)},

		{"GET", "/usage", false, p(h.UsagePage)},
		{"GET", "/profile", false, p(h.ProfilePage)},
		{"POST", "/profile/certificate", false, p(h.DownloadCertificate)},
		{"POST", "/profile/certificates/{serial}/revoke", false, p(h.RevokeCertificateForm)},
		{"POST", "/profile/ssh-keys", false, p(h.AddSSHKey)},
		{"POST", "/profile/ssh-keys/{id}/delete", false, p(h.DeleteSSHKey)},
		{"POST", "/profile/mail", false, p(h.SetMailSettings)},

		{"GET", "/admin", false, p(h.AdminPage)},
		{"POST", "/admin/users/{id}/admin", false, p(h.AdminSetAdmin)},
		{"POST", "/admin/projects", false, p(h.AdminCreateProject)},
		{"POST", "/admin/projects/{id}/members", false, p(h.AdminAddMember)},
		{"POST", "/admin/projects/{id}/members/{user}/delete", false, p(h.AdminRemoveMember)},
		{"POST", "/admin/clusters", false, p(h.AdminCreateCluster)},
		{"POST", "/admin/clusters/{id}/private", false, p(h.AdminSetClusterPrivate)},
		{"POST", "/admin/clusters/{id}/owners", false, p(h.AdminAddClusterOwner)},
		{"POST", "/admin/clusters/{id}/owners/{project}/delete", false, p(h.AdminRemoveClusterOwner)},
		{"POST", "/admin/slave-token", false, p(h.AdminSlaveToken)},
		{"POST", "/admin/slaves/{name}/accepting", false, p(h.AdminSetSlaveAccepting)},
		{"POST", "/admin/users/{name}/disabled", false, p(h.AdminSetUserDisabled)},
		{"POST", "/admin/slaves/{name}/disabled", false, p(h.AdminSetSlaveDisabled)},
		{"POST", "/admin/certificates/{serial}/revoke", false, p(h.AdminRevokeCertificate)},
		{"POST", "/admin/services", false, p(h.AdminCreateService)},
		{"POST", "/admin/services/{name}/revoke", false, p(h.AdminRevokeService)},
	}
}

// staticFiles serves the embedded stylesheet and htmx.
var staticFiles = static.Handler()

func serveStatic(w http.ResponseWriter, r *http.Request) error {
	staticFiles.ServeHTTP(w, r)
	return nil
}
