package handlers

import (
	"database/sql"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/opengpulab/gpulab/store"
)

// ReservationView is a reservation as the API shows it: holders by name.
type ReservationView struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	ClusterID  int       `json:"clusterId,omitempty"`
	SlaveNames []string  `json:"slaveNames"`
	GPUs       int       `json:"gpus"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	Users      []string  `json:"users"`
	Projects   []string  `json:"projects"`
	// Mine says whether the caller holds it (by name or through a project).
	Mine bool `json:"mine"`
}

// reservationRequest is the body of POST reservations.
type reservationRequest struct {
	Name       string    `json:"name"`
	ClusterID  int       `json:"clusterId"`
	SlaveNames []string  `json:"slaveNames"`
	GPUs       int       `json:"gpus"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	Users      []string  `json:"users"`
	Projects   []string  `json:"projects"`
}

// Bounds of a reservation request: far above any real one, far below what hurts.
const (
	maxReservationHolders = 1000
	maxReservationSlaves  = 256
	maxReservationGPUs    = 4096
	maxNameBytes          = 256
)

// validate checks the parts of a reservation that need no database, each error naming its field.
func (req reservationRequest) validate() error {
	if err := checkText("name", req.Name, maxNameBytes); err != nil {
		return err
	}
	switch {
	case req.ClusterID < 0:
		return fieldError("clusterId", "must be a cluster id, not %d", req.ClusterID)
	case req.GPUs > maxReservationGPUs:
		return fieldError("gpus", "must be at most %d, not %d", maxReservationGPUs, req.GPUs)
	case len(req.SlaveNames) > maxReservationSlaves:
		return fieldError("slaveNames", "has %d entries: at most %d are accepted", len(req.SlaveNames), maxReservationSlaves)
	case len(req.Users) > maxReservationHolders:
		return fieldError("users", "has %d entries: at most %d are accepted", len(req.Users), maxReservationHolders)
	case len(req.Projects) > maxReservationHolders:
		return fieldError("projects", "has %d entries: at most %d are accepted", len(req.Projects), maxReservationHolders)
	}
	for field, list := range map[string][]string{"slaveNames": req.SlaveNames, "users": req.Users, "projects": req.Projects} {
		for _, s := range list {
			if err := checkText(field, s, maxNameBytes); err != nil {
				return err
			}
		}
	}
	return nil
}

func holds(c *Caller, r store.Reservation) bool {
	if slices.Contains(r.UserIDs, c.User.ID) {
		return true
	}
	for _, p := range r.ProjectIDs {
		if c.InProject(p) {
			return true
		}
	}
	return false
}

func (h *Handlers) reservationView(r *http.Request, c *Caller, res store.Reservation) (ReservationView, error) {
	v := ReservationView{ID: res.ID, Name: res.Name, SlaveNames: res.SlaveNames, GPUs: res.GPUs, Start: res.Start, End: res.End,
		Users: []string{}, Projects: []string{}, Mine: holds(c, res)}
	if res.ClusterID.Valid {
		v.ClusterID = int(res.ClusterID.Int64)
	}
	for _, id := range res.UserIDs {
		u, err := h.store.GetUser(r.Context(), id)
		if err != nil {
			return v, err
		}
		v.Users = append(v.Users, u.Name)
	}
	for _, id := range res.ProjectIDs {
		p, err := h.store.GetProject(r.Context(), id)
		if err != nil {
			return v, err
		}
		v.Projects = append(v.Projects, p.Name)
	}
	return v, nil
}

// ListReservations is GET reservations: current and future reservations; admins see all, others
// those they hold.
func (h *Handlers) ListReservations(w http.ResponseWriter, r *http.Request) error {
	c, err := requireUser(r)
	if err != nil {
		return err
	}
	now, err := h.store.Now(r.Context())
	if err != nil {
		return err
	}
	all, err := h.store.ListReservations(r.Context(), now)
	if err != nil {
		return err
	}
	out := []ReservationView{}
	for _, res := range all {
		if !c.Admin() && !holds(c, res) {
			continue
		}
		v, err := h.reservationView(r, c, res)
		if err != nil {
			return err
		}
		out = append(out, v)
	}
	writeList(w, r, out)
	return nil
}

// CreateReservation is POST reservations (admins): resources, a window and its holders.
func (h *Handlers) CreateReservation(w http.ResponseWriter, r *http.Request) error {
	c, err := requireReservationAdmin(r)
	if err != nil {
		return err
	}
	var req reservationRequest
	if err := decodeJSON(w, r, 1<<16, &req); err != nil {
		return err
	}
	created, err := h.createReservation(r, c, req)
	if err != nil {
		return err
	}
	v, err := h.reservationView(r, c, created)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, v)
	return nil
}

// requireReservationAdmin returns the caller if he may create reservations. It runs before the
// body is read: a non-admin gets 403 whatever he sent, never a 400 about his body.
func requireReservationAdmin(r *http.Request) (*Caller, error) {
	c, err := requireUser(r)
	if err == nil && !c.Admin() {
		err = errorf(http.StatusForbidden, "only admins create reservations")
	}
	return c, err
}

// createReservation checks and stores a reservation for the API and the portal's form alike.
func (h *Handlers) createReservation(r *http.Request, c *Caller, req reservationRequest) (store.Reservation, error) {
	if !c.Admin() {
		return store.Reservation{}, errorf(http.StatusForbidden, "only admins create reservations")
	}
	if err := req.validate(); err != nil {
		return store.Reservation{}, err
	}
	ctx := r.Context()
	now, err := h.store.Now(ctx)
	if err != nil {
		return store.Reservation{}, err
	}
	res := store.Reservation{ID: uuid.NewString(), Name: req.Name, SlaveNames: req.SlaveNames, GPUs: req.GPUs, Start: req.Start, End: req.End, CreatedBy: c.User.ID}
	switch {
	case req.ClusterID == 0 && len(req.SlaveNames) == 0:
		return res, fieldError("clusterId", "give a cluster or slaveNames")
	case req.GPUs < 0:
		return res, fieldError("gpus", "must be 0 (whole slaves) or more, not %d", req.GPUs)
	case req.Start.IsZero() || req.End.IsZero() || !req.End.After(req.Start):
		return res, fieldError("end", "must be after start")
	case !req.End.After(now):
		return res, fieldError("end", "is in the past")
	case len(req.Users) == 0 && len(req.Projects) == 0:
		return res, fieldError("users", "a reservation needs holders: users or projects")
	}
	if req.ClusterID != 0 {
		if _, err := h.store.GetCluster(ctx, req.ClusterID); errors.Is(err, store.ErrNotFound) {
			return res, fieldError("clusterId", "no cluster %d", req.ClusterID)
		} else if err != nil {
			return res, err
		}
		res.ClusterID = sql.NullInt64{Int64: int64(req.ClusterID), Valid: true}
	}
	for _, name := range req.Users {
		u, err := h.store.GetUserByName(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return res, fieldError("users", "no user %q", name)
		} else if err != nil {
			return res, err
		}
		res.UserIDs = append(res.UserIDs, u.ID)
	}
	for _, name := range req.Projects {
		p, err := h.store.GetProjectByName(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return res, fieldError("projects", "no project %q", name)
		} else if err != nil {
			return res, err
		}
		res.ProjectIDs = append(res.ProjectIDs, p.ID)
	}
	created, err := h.store.CreateReservation(ctx, res)
	if err != nil {
		return res, err
	}
	h.log.InfoContext(ctx, "reservation created", "reservation", created.ID, "name", created.Name, "by", c.User.Name)
	h.wakeScheduler()
	return created, nil
}

// DeleteReservation is DELETE reservations/{rid}: admins, and the users who hold it.
func (h *Handlers) DeleteReservation(w http.ResponseWriter, r *http.Request) error {
	c, err := requireUser(r)
	if err != nil {
		return err
	}
	if err := h.deleteReservation(r, c, r.PathValue("rid")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deleteReservation removes a reservation for the API and the portal alike. Holders through a
// project see it but may not delete it: only admins and the users it names.
func (h *Handlers) deleteReservation(r *http.Request, c *Caller, id string) error {
	if _, err := uuid.Parse(id); err != nil {
		return fieldError("id", "must be a reservation UUID, not %q", id)
	}
	res, err := h.store.GetReservation(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !c.Admin() && !holds(c, res)) {
		return errorf(http.StatusNotFound, "no reservation %s", id)
	} else if err != nil {
		return err
	}
	if !mayDelete(c, res) {
		return errorf(http.StatusForbidden, "only admins and the users named in reservation %s may delete it", id)
	}
	if err := h.store.DeleteReservation(r.Context(), id); err != nil {
		return err
	}
	h.log.InfoContext(r.Context(), "reservation deleted", "reservation", id, "by", c.User.Name)
	h.wakeScheduler()
	return nil
}

func mayDelete(c *Caller, res store.Reservation) bool {
	return c.Admin() || slices.Contains(res.UserIDs, c.User.ID)
}
