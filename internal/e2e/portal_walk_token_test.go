package e2e

import (
	"github.com/a-h/templ"

	"github.com/opengpulab/gpulab/views"
)

// The answer to an admin's new slave join token, in the walk.
func init() {
	walkExtras = append(walkExtras, walkExtra{name: "admin-slave-token", path: "/admin/slave-token", page: func(s *walkSite) templ.Component {
		return views.SlaveTokenPage(views.SlaveTokenView{Chrome: s.chrome(views.NavAdmin), Name: "gpu2", ClusterID: 1, Valid: "24h0m0s",
			Token: "q3Jd0cW5xYvB8sLkT1nZ2aUeR7mH4pQo", Command: "gpulab-slave join --master https://master.example.org:8443 --ca ca.pem --token q3Jd0cW5xYvB8sLkT1nZ2aUeR7mH4pQo"})
	}})
}
