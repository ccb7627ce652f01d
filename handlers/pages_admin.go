package handlers

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/opengpulab/gpulab/pki"
	"github.com/opengpulab/gpulab/store"
	"github.com/opengpulab/gpulab/views"
)

// requireAdmin returns the caller if he is an admin: 403 for everybody else.
func requireAdmin(r *http.Request) (*Caller, error) {
	c, err := requireUser(r)
	if err != nil {
		return nil, err
	}
	if !c.Admin() {
		return nil, errorf(http.StatusForbidden, "the admin pages are for admins only")
	}
	return c, nil
}

// AdminPage is GET /admin: users, projects with their members, clusters with their owners,
// slaves. Admins only.
func (h *Handlers) AdminPage(w http.ResponseWriter, r *http.Request) error {
	c, err := requireAdmin(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	v := views.AdminView{Chrome: h.chrome(r, views.NavAdmin), SelfID: c.User.ID}
	if v.Users, err = h.store.ListUsers(ctx); err != nil {
		return err
	}
	projects, err := h.store.ListProjects(ctx)
	if err != nil {
		return err
	}
	members, err := h.store.ListMemberships(ctx)
	if err != nil {
		return err
	}
	byID := map[int64]store.Project{}
	for _, p := range projects {
		byID[p.ID] = p
		v.Projects = append(v.Projects, views.AdminProject{Project: p, Members: members[p.ID]})
	}
	clusters, err := h.store.ListClusters(ctx)
	if err != nil {
		return err
	}
	owners, err := h.store.ClusterOwners(ctx)
	if err != nil {
		return err
	}
	for _, cl := range clusters {
		ac := views.AdminCluster{Cluster: cl}
		for _, id := range owners[cl.ID] {
			ac.Owners = append(ac.Owners, byID[id])
		}
		v.Clusters = append(v.Clusters, ac)
	}
	slaves, err := h.store.ListSlaves(ctx)
	if err != nil {
		return err
	}
	for _, s := range slaves {
		as := views.AdminSlave{Name: s.Name, ClusterID: s.ClusterID, Online: s.Online, Accepting: s.AcceptingJobs, Disabled: s.Disabled}
		if s.LastHeartbeat.Valid {
			t := s.LastHeartbeat.Time
			as.LastHeartbeat = &t
		}
		v.Slaves = append(v.Slaves, as)
	}
	if v.Certificates, err = h.store.ListCertificates(ctx, "", ""); err != nil {
		return err
	}
	if v.Services, err = h.store.ListServices(ctx); err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, views.AdminPage(v))
}

// adminForm is the start of every admin post: an admin caller and the parsed form.
func adminForm(w http.ResponseWriter, r *http.Request) (*Caller, error) {
	c, err := requireAdmin(r)
	if err != nil {
		return nil, err
	}
	return c, parseForm(w, r)
}

func formBool(r *http.Request, name string) (bool, error) {
	b, err := strconv.ParseBool(r.PostForm.Get(name))
	if err != nil {
		return false, fieldError(name, "must be true or false, not %q", r.PostForm.Get(name))
	}
	return b, nil
}

func pathInt(r *http.Request, name, what string) (int64, error) {
	n, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	if err != nil || n < 1 {
		return 0, errorf(http.StatusNotFound, "no %s %q", what, r.PathValue(name))
	}
	return n, nil
}

// notFound turns the store's ErrNotFound into a 404 that says what is missing.
func notFound(err error, format string, args ...any) error {
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, format, args...)
	}
	return err
}

// AdminSetAdmin is POST /admin/users/{id}/admin (admin=true|false). An admin cannot revoke
// his own rights, so the last admin cannot lock everybody out.
func (h *Handlers) AdminSetAdmin(w http.ResponseWriter, r *http.Request) error {
	c, err := adminForm(w, r)
	if err != nil {
		return err
	}
	id, err := pathInt(r, "id", "user")
	if err != nil {
		return err
	}
	admin, err := formBool(r, "admin")
	if err != nil {
		return err
	}
	if id == c.User.ID && !admin {
		return errorf(http.StatusConflict, "you cannot revoke your own admin rights: ask another admin")
	}
	if err := h.store.SetAdmin(r.Context(), id, admin); err != nil {
		return notFound(err, "no user %d", id)
	}
	h.log.InfoContext(r.Context(), "admin rights changed", "user_id", id, "admin", admin, "by", c.User.Name)
	return seeOther(w, r, "/admin#admin-users")
}

// AdminCreateProject is POST /admin/projects (name, description).
func (h *Handlers) AdminCreateProject(w http.ResponseWriter, r *http.Request) error {
	c, err := adminForm(w, r)
	if err != nil {
		return err
	}
	name, desc := strings.TrimSpace(r.PostForm.Get("name")), strings.TrimSpace(r.PostForm.Get("description"))
	if !pki.NamePattern.MatchString(name) {
		return fieldError("name", "a project name is lowercase letters, digits, '.', '_' or '-', not %q", name)
	}
	if _, err := h.store.CreateProject(r.Context(), pki.ProjectURN(h.cfg.Authority, name), name, desc, 0); errors.Is(err, store.ErrConflict) {
		return errorf(http.StatusConflict, "project %s exists already", name)
	} else if err != nil {
		return err
	}
	h.log.InfoContext(r.Context(), "project created", "project", name, "by", c.User.Name)
	return seeOther(w, r, "/admin#admin-projects")
}

// AdminAddMember is POST /admin/projects/{id}/members (user: a name). Like `gpulab-master
// member add`, a user who never logged in is created, so he can submit from his first login.
func (h *Handlers) AdminAddMember(w http.ResponseWriter, r *http.Request) error {
	c, err := adminForm(w, r)
	if err != nil {
		return err
	}
	pid, err := pathInt(r, "id", "project")
	if err != nil {
		return err
	}
	name := strings.TrimSpace(r.PostForm.Get("user"))
	if !pki.NamePattern.MatchString(name) {
		return fieldError("user", "a user name is lowercase letters, digits, '.', '_' or '-', not %q", name)
	}
	ctx := r.Context()
	if _, err := h.store.GetProject(ctx, pid); err != nil {
		return notFound(err, "no project %d", pid)
	}
	u, err := h.store.GetUserByName(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		u, err = h.store.UpsertUser(ctx, pki.UserURN(h.cfg.Authority, name), name, "", false)
	}
	if err != nil {
		return err
	}
	if err := h.store.AddMember(ctx, pid, u.ID); err != nil {
		return err
	}
	h.log.InfoContext(ctx, "member added", "project_id", pid, "user", name, "by", c.User.Name)
	return seeOther(w, r, "/admin#admin-projects")
}

// AdminRemoveMember is POST /admin/projects/{id}/members/{user}/delete.
func (h *Handlers) AdminRemoveMember(w http.ResponseWriter, r *http.Request) error {
	c, err := adminForm(w, r)
	if err != nil {
		return err
	}
	pid, err := pathInt(r, "id", "project")
	if err != nil {
		return err
	}
	uid, err := pathInt(r, "user", "user")
	if err != nil {
		return err
	}
	if err := h.store.RemoveMember(r.Context(), pid, uid); err != nil {
		return notFound(err, "user %d is not a member of project %d", uid, pid)
	}
	h.log.InfoContext(r.Context(), "member removed", "project_id", pid, "user_id", uid, "by", c.User.Name)
	return seeOther(w, r, "/admin#admin-projects")
}

// AdminCreateCluster is POST /admin/clusters (id, name, description, private).
func (h *Handlers) AdminCreateCluster(w http.ResponseWriter, r *http.Request) error {
	c, err := adminForm(w, r)
	if err != nil {
		return err
	}
	id, err := strconv.Atoi(strings.TrimSpace(r.PostForm.Get("id")))
	if err != nil || id < 1 {
		return fieldError("id", "a cluster id is a positive integer, not %q", r.PostForm.Get("id"))
	}
	cl := store.Cluster{ID: id, Name: strings.TrimSpace(r.PostForm.Get("name")), Description: strings.TrimSpace(r.PostForm.Get("description")),
		Private: r.PostForm.Get("private") == "true", GuestLimitS: 3600}
	if _, err := h.store.CreateCluster(r.Context(), cl); errors.Is(err, store.ErrConflict) {
		return errorf(http.StatusConflict, "cluster %d exists already", id)
	} else if err != nil {
		return err
	}
	h.log.InfoContext(r.Context(), "cluster created", "cluster", id, "by", c.User.Name)
	return seeOther(w, r, "/admin#admin-clusters")
}

// AdminSetClusterPrivate is POST /admin/clusters/{id}/private (private=true|false).
func (h *Handlers) AdminSetClusterPrivate(w http.ResponseWriter, r *http.Request) error {
	c, err := adminForm(w, r)
	if err != nil {
		return err
	}
	id, err := pathInt(r, "id", "cluster")
	if err != nil {
		return err
	}
	private, err := formBool(r, "private")
	if err != nil {
		return err
	}
	if err := h.store.SetClusterPrivate(r.Context(), int(id), private); err != nil {
		return notFound(err, "no cluster %d", id)
	}
	h.wakeScheduler()
	h.log.InfoContext(r.Context(), "cluster privacy changed", "cluster", id, "private", private, "by", c.User.Name)
	return seeOther(w, r, "/admin#admin-clusters")
}

// AdminAddClusterOwner is POST /admin/clusters/{id}/owners (project: an id).
func (h *Handlers) AdminAddClusterOwner(w http.ResponseWriter, r *http.Request) error {
	c, err := adminForm(w, r)
	if err != nil {
		return err
	}
	id, err := pathInt(r, "id", "cluster")
	if err != nil {
		return err
	}
	pid, err := strconv.ParseInt(r.PostForm.Get("project"), 10, 64)
	if err != nil {
		return fieldError("project", "must be a project id, not %q", r.PostForm.Get("project"))
	}
	if _, err := h.store.GetCluster(r.Context(), int(id)); err != nil {
		return notFound(err, "no cluster %d", id)
	}
	if _, err := h.store.GetProject(r.Context(), pid); err != nil {
		return notFound(err, "no project %d", pid)
	}
	if err := h.store.AddClusterOwner(r.Context(), int(id), pid); err != nil {
		return err
	}
	h.wakeScheduler()
	h.log.InfoContext(r.Context(), "cluster owner added", "cluster", id, "project_id", pid, "by", c.User.Name)
	return seeOther(w, r, "/admin#admin-clusters")
}

// AdminRemoveClusterOwner is POST /admin/clusters/{id}/owners/{project}/delete.
func (h *Handlers) AdminRemoveClusterOwner(w http.ResponseWriter, r *http.Request) error {
	c, err := adminForm(w, r)
	if err != nil {
		return err
	}
	id, err := pathInt(r, "id", "cluster")
	if err != nil {
		return err
	}
	pid, err := pathInt(r, "project", "project")
	if err != nil {
		return err
	}
	if err := h.store.RemoveClusterOwner(r.Context(), int(id), pid); err != nil {
		return notFound(err, "project %d does not own cluster %d", pid, id)
	}
	h.wakeScheduler()
	h.log.InfoContext(r.Context(), "cluster owner removed", "cluster", id, "project_id", pid, "by", c.User.Name)
	return seeOther(w, r, "/admin#admin-clusters")
}

// AdminSetSlaveAccepting is POST /admin/slaves/{name}/accepting (accepting=false drains the
// slave: its jobs run on, it gets no new ones; true opens it again).
func (h *Handlers) AdminSetSlaveAccepting(w http.ResponseWriter, r *http.Request) error {
	c, err := adminForm(w, r)
	if err != nil {
		return err
	}
	accepting, err := formBool(r, "accepting")
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := h.store.SetSlaveAccepting(r.Context(), name, accepting); err != nil {
		return notFound(err, "no slave %s", name)
	}
	h.wakeScheduler()
	h.log.InfoContext(r.Context(), "slave accepting changed", "slave", name, "accepting", accepting, "by", c.User.Name)
	return seeOther(w, r, "/admin#admin-slaves")
}

// AdminSetUserDisabled is POST /admin/users/{name}/disabled (disabled=true|false): a disabled
// user is refused (401) at his next request on every master.
func (h *Handlers) AdminSetUserDisabled(w http.ResponseWriter, r *http.Request) error {
	c, err := adminForm(w, r)
	if err != nil {
		return err
	}
	disabled, err := formBool(r, "disabled")
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if name == c.User.Name && disabled {
		return errorf(http.StatusConflict, "you cannot disable yourself: ask another admin")
	}
	if err := h.store.SetUserDisabled(r.Context(), name, disabled); err != nil {
		return notFound(err, "no user %s", name)
	}
	h.log.InfoContext(r.Context(), "user disabled changed", "user", name, "disabled", disabled, "by", c.User.Name)
	return seeOther(w, r, "/admin#admin-users")
}

// AdminSetSlaveDisabled is POST /admin/slaves/{name}/disabled (disabled=true|false): a disabled
// slave gets no jobs and no job secrets; its untaken assigned jobs are queued again.
func (h *Handlers) AdminSetSlaveDisabled(w http.ResponseWriter, r *http.Request) error {
	c, err := adminForm(w, r)
	if err != nil {
		return err
	}
	disabled, err := formBool(r, "disabled")
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	requeued, err := h.store.SetSlaveDisabled(r.Context(), name, disabled)
	if err != nil {
		return notFound(err, "no slave %s", name)
	}
	h.wakeScheduler()
	h.log.InfoContext(r.Context(), "slave disabled changed", "slave", name, "disabled", disabled, "requeued", len(requeued), "by", c.User.Name)
	return seeOther(w, r, "/admin#admin-slaves")
}

// AdminRevokeCertificate is POST /admin/certificates/{serial}/revoke (admins: any certificate).
func (h *Handlers) AdminRevokeCertificate(w http.ResponseWriter, r *http.Request) error {
	c, err := adminForm(w, r)
	if err != nil {
		return err
	}
	if _, err := h.revokeCertificate(r.Context(), c, r.PathValue("serial")); err != nil {
		return err
	}
	return seeOther(w, r, "/admin#certificates")
}
