package scheduler

// Order returns the queued jobs in the order Plan gives them their turns (queueOrder: the
// policy's key, then age). The leader uses it to choose which waiting jobs a narrowed pass
// plans (the first ones in this order); the order of any subset of the queue is the same
// order restricted to it, since the key of a job does not depend on the other queued jobs.
func (s Snapshot) Order() []Job {
	order := queueOrder(s, nil)
	out := make([]Job, len(order))
	for i, j := range order {
		out[i] = *j
	}
	return out
}
