package handlers

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/opengpulab/gpulab/views"
)

// calendarDays is how many days the reservations calendar shows, from today on.
const calendarDays = 14

// ReservationsPage is GET /reservations: a calendar of the current and coming reservations the
// caller may see (all of them for admins, the ones he holds otherwise), with delete buttons
// where he may delete and, for admins, the form that books a new one.
func (h *Handlers) ReservationsPage(w http.ResponseWriter, r *http.Request) error {
	if wantsJSON(r) {
		return h.ListReservations(w, r)
	}
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
	v := views.ReservationsView{Chrome: h.chrome(r, views.NavReservations), CanCreate: c.Admin(),
		Days: views.CalendarDays(now, calendarDays)}
	for _, res := range all {
		if !c.Admin() && !holds(c, res) {
			continue
		}
		rv, err := h.reservationView(r, c, res)
		if err != nil {
			return err
		}
		v.Rows = append(v.Rows, views.ReservationRow{ID: rv.ID, Name: rv.Name, Resources: resourcesText(rv),
			Holders: holdersText(rv), Start: rv.Start, End: rv.End, Mine: rv.Mine,
			Active: !now.Before(rv.Start), CanDelete: mayDelete(c, res)})
	}
	if c.Admin() {
		clusters, err := h.store.ListClusters(r.Context())
		if err != nil {
			return err
		}
		for _, cl := range clusters {
			v.Clusters = append(v.Clusters, cl.ID)
		}
	}
	return h.render(w, r, http.StatusOK, views.ReservationsPage(v))
}

// resourcesText says what a reservation books: "2 GPUs of cluster 1", "whole slaves gpu1, gpu2".
func resourcesText(v ReservationView) string {
	where := "cluster " + strconv.Itoa(v.ClusterID)
	if len(v.SlaveNames) > 0 {
		where = strings.Join(v.SlaveNames, ", ")
		if v.ClusterID != 0 {
			where += " (cluster " + strconv.Itoa(v.ClusterID) + ")"
		}
	}
	switch v.GPUs {
	case 0:
		if len(v.SlaveNames) == 1 {
			return "whole slave " + where
		}
		return "whole slaves of " + where
	case 1:
		return "1 GPU of " + where
	}
	return strconv.Itoa(v.GPUs) + " GPUs of " + where
}

func holdersText(v ReservationView) string {
	var parts []string
	if len(v.Users) > 0 {
		parts = append(parts, "users "+strings.Join(v.Users, ", "))
	}
	if len(v.Projects) > 0 {
		parts = append(parts, "projects "+strings.Join(v.Projects, ", "))
	}
	return strings.Join(parts, "; ")
}

// CreateReservationForm is POST /reservations, the admin's booking form: the API's checks,
// with form fields named like the API's keys so that an error names the field to fix. Times
// are UTC (datetime-local inputs carry no zone).
func (h *Handlers) CreateReservationForm(w http.ResponseWriter, r *http.Request) error {
	c, err := requireReservationAdmin(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	f := r.PostForm
	req := reservationRequest{Name: strings.TrimSpace(f.Get("name")), SlaveNames: splitList(f.Get("slaveNames")),
		Users: splitList(f.Get("users")), Projects: splitList(f.Get("projects"))}
	if s := strings.TrimSpace(f.Get("clusterId")); s != "" {
		if req.ClusterID, err = strconv.Atoi(s); err != nil || req.ClusterID < 1 {
			return fieldError("clusterId", "must be a cluster id, not %q", s)
		}
	}
	if s := strings.TrimSpace(f.Get("gpus")); s != "" {
		if req.GPUs, err = strconv.Atoi(s); err != nil {
			return fieldError("gpus", "must be a number (0: whole slaves), not %q", s)
		}
	}
	if req.Start, err = formTime(f.Get("start"), "start"); err != nil {
		return err
	}
	if req.End, err = formTime(f.Get("end"), "end"); err != nil {
		return err
	}
	if _, err := h.createReservation(r, c, req); err != nil {
		return err
	}
	return seeOther(w, r, "/reservations")
}

// DeleteReservationForm is POST /reservations/{rid}/delete.
func (h *Handlers) DeleteReservationForm(w http.ResponseWriter, r *http.Request) error {
	c, err := requireUser(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	if err := h.deleteReservation(r, c, r.PathValue("rid")); err != nil {
		return err
	}
	return seeOther(w, r, "/reservations")
}

// splitList reads a comma- or space-separated list of names.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
}

// formTime reads a datetime-local value (UTC) or an RFC 3339 time.
func formTime(s, field string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fieldError(field, "must be a date and time like 2026-12-01T10:00 (UTC), not %q", s)
}
