package bench

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times (100 on Linux).
const clockTicks = 100

// cpuTimes reads a process's user+system CPU time from /proc/PID/stat, and its parent. With
// children, the CPU time of its children that exited (and were waited for) is added.
func cpuTimes(pid int, children bool) (cpu time.Duration, ppid int, ok bool) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')') // the command may hold spaces
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	if children {
		cut, _ := strconv.ParseInt(f[13], 10, 64)
		cst, _ := strconv.ParseInt(f[14], 10, 64)
		ut += cut + cst
	}
	return time.Duration(ut+st) * time.Second / clockTicks, ppid, true
}

// cpuMeter splits the machine's CPU time between the master process, the Postgres cluster (its
// postmaster and every child) and the benchmark itself (the load generator, fake slaves).
type cpuMeter struct {
	db                    *sql.DB
	sessions              int64
	masterPID, postmaster int
	at                    time.Time
	master, pg, self, all time.Duration
}

// machineBusy is the CPU time all processes used since boot (/proc/stat: all but idle and
// iowait).
func machineBusy() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i != 3 && i != 4 && i < 8 { // idle, iowait; guest time is counted in user already
			busy += n
		}
	}
	return time.Duration(busy) * time.Second / clockTicks
}

// newCPUMeter finds the postmaster of the database at dbURL; the figures start now.
func newCPUMeter(t testing.TB, masterPID int, dbURL string) *cpuMeter {
	t.Helper()
	c := &cpuMeter{masterPID: masterPID, db: openDB(t, dbURL, 1)}
	var pid int
	if err := c.db.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid); err == nil {
		_, c.postmaster, _ = cpuTimes(pid, false)
	}
	c.reset()
	return c
}

func (c *cpuMeter) sample() (master, pg, self, all time.Duration) {
	all = machineBusy()
	master, _, _ = cpuTimes(c.masterPID, false)
	self, _, _ = cpuTimes(os.Getpid(), false)
	if c.postmaster == 0 {
		return master, 0, self, all
	}
	pg, _, _ = cpuTimes(c.postmaster, true)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cpu, ppid, ok := cpuTimes(pid, false); ok && ppid == c.postmaster {
			pg += cpu
		}
	}
	return master, pg, self, all
}

// sessionCount is how many sessions the database has had (pg_stat_database.sessions).
func (c *cpuMeter) sessionCount() int64 {
	var n int64
	_ = c.db.QueryRow(`SELECT sessions FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n
}

// reset starts a new measurement.
func (c *cpuMeter) reset() {
	c.sessions = c.sessionCount()
	c.at = time.Now()
	c.master, c.pg, c.self, c.all = c.sample()
}

// String is the CPU used since reset, in cores, by the master, Postgres, the benchmark (load
// generator, fake slaves) and everything else on the machine (other work sharing it).
func (c *cpuMeter) String() string {
	m, p, s, a := c.sample()
	wall := time.Since(c.at).Seconds()
	core := func(d time.Duration) float64 { return d.Seconds() / wall }
	dm, dp, ds := m-c.master, p-c.pg, s-c.self
	return fmt.Sprintf("CPU in cores: master %.2f, postgres %.2f, bench %.2f, rest of the machine %.2f; %d Postgres sessions opened",
		core(dm), core(dp), core(ds), core(max(a-c.all-dm-dp-ds, 0)), c.sessionCount()-c.sessions)
}

// masterCores is the master's CPU since reset, in cores.
func (c *cpuMeter) masterCores() float64 {
	m, _, _, _ := c.sample()
	return (m - c.master).Seconds() / time.Since(c.at).Seconds()
}

// waitQuiet waits (up to limit) until the rest of the machine uses less than a quarter of a
// core, so that a scenario does not measure someone else's work, and returns what it found.
func waitQuiet(t testing.TB, limit time.Duration) float64 {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		a0 := machineBusy()
		s0, _, _ := cpuTimes(os.Getpid(), true)
		time.Sleep(2 * time.Second)
		s1, _, _ := cpuTimes(os.Getpid(), true)
		others := (machineBusy() - a0 - (s1 - s0)).Seconds() / 2
		if others < 0.25 || time.Now().After(deadline) {
			return others
		}
		t.Logf("the machine is busy (%.2f cores used by other processes); waiting for it to calm down", others)
	}
}
