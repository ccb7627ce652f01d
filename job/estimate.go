package job

import "time"

// EstimateRange renders a queued job's estimated start range the way users read it, "likely
// 14:10–15:30", in loc, with dates where the range does not lie within today (now, in loc).
// It is "" when the scheduler gave no range.
func (s StateScheduling) EstimateRange(now time.Time, loc *time.Location) string {
	if s.EstimatedStartEarliest == nil || s.EstimatedStartLatest == nil {
		return ""
	}
	a, b := s.EstimatedStartEarliest.In(loc), s.EstimatedStartLatest.In(loc)
	now = now.In(loc)
	day := func(t time.Time) bool { return t.Year() == now.Year() && t.YearDay() == now.YearDay() }
	f := func(t time.Time) string {
		if day(t) {
			return t.Format("15:04")
		}
		return t.Format("Jan 2 15:04")
	}
	if a.Truncate(time.Minute).Equal(b.Truncate(time.Minute)) {
		return "likely " + f(a)
	}
	return "likely " + f(a) + "–" + f(b)
}
