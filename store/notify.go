package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/lib/pq"
)

// Several masters share one database; what one of them changes must wake the others: the
// scheduler leader (a submit, a job end, resources freed) and the long polls of slaves waiting
// on other masters (jobs assigned to them, jobs to stop). Postgres notifications carry it, and
// are delivered at commit, so a woken master always reads the change.
const (
	// ChannelScheduler wakes the scheduler leader.
	ChannelScheduler = "gpulab_scheduler"
	// ChannelSlaves wakes the long polls of the slaves named in the payload (comma-separated).
	ChannelSlaves = "gpulab_slaves"
)

// notifyScheduler sends the scheduler's notification in a statement of its own, whose commit
// does not wait for the WAL's flush (WakeScheduler's sender): a notifying transaction gets a
// transaction id and a commit record, and holds Postgres's lock on the notification queue
// until that record is flushed. A notification lost in a crash of Postgres costs the leader
// the time to its next pass.
func (s *Store) notifyScheduler(ctx context.Context) error {
	_, err := s.q.ExecContext(ctx, `SELECT pg_notify($1, ''), set_config('synchronous_commit', 'off', true)`, ChannelScheduler)
	return mapErr(err, "notify the scheduler")
}

// NotifySlaves wakes the long polls of the named slaves on every master. Inside a transaction
// the notification leaves at commit.
func (s *Store) NotifySlaves(ctx context.Context, names ...string) error {
	for _, payload := range slavePayloads(names) {
		if _, err := s.q.ExecContext(ctx, `SELECT pg_notify($1, $2)`, ChannelSlaves, payload); err != nil {
			return mapErr(err, "notify slaves")
		}
	}
	return nil
}

// slavePayloads are the payloads of ChannelSlaves's notifications naming these slaves: a
// payload is at most 8000 bytes, so long lists go in pieces.
func slavePayloads(names []string) []string {
	var out []string
	for len(names) > 0 {
		n, size := 0, 0
		for n < len(names) && size+len(names[n])+1 < 7900 {
			size += len(names[n]) + 1
			n++
		}
		n = max(n, 1)
		out = append(out, strings.Join(names[:n], ","))
		names = names[n:]
	}
	return out
}

// Listen calls onScheduler and onSlaves for the notifications of every master until ctx ends.
// After the listening connection was lost and came back, both are called as if everything had
// changed (notifications sent meanwhile are lost), onSlaves with nil meaning all slaves.
// ready, when not nil, is called once both channels are listened to: a notification sent
// after it is delivered (one sent before is not, which is what a caller that must not miss
// one, such as a test starting two masters, waits for).
func (s *Store) Listen(ctx context.Context, log *slog.Logger, onScheduler func(), onSlaves func(names []string), ready func()) error {
	l := pq.NewListener(s.url, time.Second, 30*time.Second, func(ev pq.ListenerEventType, err error) {
		switch ev {
		case pq.ListenerEventConnectionAttemptFailed, pq.ListenerEventDisconnected:
			log.Warn("database notifications: connection lost", "err", err)
		case pq.ListenerEventReconnected:
			log.Info("database notifications: connection back")
		}
	})
	// Closing the listener ends a Listen that waits for a database that is away.
	ctx, cancel := context.WithCancel(ctx)
	closed := make(chan struct{})
	defer func() { cancel(); <-closed }()
	go func() { defer close(closed); <-ctx.Done(); _ = l.Close() }()
	for _, ch := range []string{ChannelScheduler, ChannelSlaves} {
		if err := l.Listen(ch); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("listen to %s: %w", ch, err)
		}
	}
	if ready != nil {
		ready()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case n := <-l.Notify:
			switch {
			case n == nil && ctx.Err() != nil:
				return nil
			case n == nil: // reconnected: anything may have happened meanwhile
				onScheduler()
				onSlaves(nil)
			case n.Channel == ChannelScheduler:
				onScheduler()
			case n.Channel == ChannelSlaves:
				onSlaves(strings.Split(n.Extra, ","))
			}
		case <-time.After(90 * time.Second):
			// lib/pq's recommended check that the connection is still alive.
			go func() { _ = l.Ping() }()
		}
	}
}
