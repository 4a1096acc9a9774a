package local

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// What Linux lets execve carry (fs/exec.c): one argument or environment
// string of at most MAX_ARG_STRLEN bytes with its NUL, and all of them with
// their pointers within a quarter of the stack limit, at least ARG_MAX and
// at most three quarters of _STK_LIM.
const (
	maxArgStrlen = 32 * 4096 // MAX_ARG_STRLEN
	minArgLimit  = 32 * 4096 // ARG_MAX
	maxArgLimit  = 6 << 20   // _STK_LIM / 4 * 3
)

// argLimit is how many bytes of arguments and environment (strings with
// their NULs, and pointers) an exec from this process may carry.
func argLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_STACK, &rl); err != nil {
		return minArgLimit
	}
	limit := uint64(maxArgLimit)
	if rl.Cur != ^uint64(0) { // RLIM_INFINITY
		limit = min(limit, rl.Cur/4)
	}
	return int(max(limit, minArgLimit))
}

// checkExec says why the supervisor could not exec a process of plan, with
// base as the environment the supervisor inherits (trainq-worker's own),
// or nil when every process fits the OS's limits.
func checkExec(plan launchPlan, base []string) error {
	limit := argLimit()
	for _, p := range plan.Procs {
		total := 0
		for i, a := range p.Argv {
			if len(a)+1 > maxArgStrlen {
				what := "argument"
				if i == len(p.Argv)-1 {
					what = "command line (the script and its flags, shell-quoted)"
				}
				return fmt.Errorf("the worker's %s is %d bytes; Linux accepts at most %d in one argument (MAX_ARG_STRLEN), so it cannot start: shorten the script or flags",
					what, len(a), maxArgStrlen-1)
			}
			total += len(a) + 1 + 8
		}
		for _, kv := range mergeEnv(base, p.Env) {
			if len(kv)+1 > maxArgStrlen {
				name, _, _ := strings.Cut(kv, "=")
				return fmt.Errorf("the worker's environment variable %.64s is %d bytes; Linux accepts at most %d (MAX_ARG_STRLEN), so it cannot start",
					name, len(kv), maxArgStrlen-1)
			}
			total += len(kv) + 1 + 8
		}
		if total > limit {
			return fmt.Errorf("the worker's command line and environment take %d bytes; Linux accepts at most %d here (a quarter of the stack limit), so it cannot start: make the script, flags or env_variables smaller",
				total, limit)
		}
	}
	return nil
}

// errNotStarted marks a worker whose supervisor ran but could not start
// one of the worker's processes (or could not start at all).
var errNotStarted = errors.New("the worker's process did not start")

// startFailure reads what the supervisor recorded about starting the
// worker's processes: nil if they started (or nothing is recorded yet), else
// the real reason, such as "fork/exec /bin/sh: argument list too long".
func startFailure(dir string) error {
	var procs []procExit
	ok, _ := readJSON(filepath.Join(dir, filePIDs), &procs)
	var rec exitRecord
	hasExit, _ := readJSON(filepath.Join(dir, fileExit), &rec)
	if !ok && hasExit {
		if rec.Killed {
			return nil
		}
		procs = rec.Processes
		if len(procs) == 0 && rec.Error != "" { // the supervisor failed before starting any
			return fmt.Errorf("%w: %s", errNotStarted, rec.Error)
		}
	}
	for _, p := range procs {
		if p.PID == 0 && p.Error != "" && p.Error != errTextOtherFailed {
			return fmt.Errorf("%w: local_rank %d: %s", errNotStarted, p.LocalRank, p.Error)
		}
	}
	return nil
}

// errTextOtherFailed is the error of a process the supervisor did not start
// because an earlier one failed to.
const errTextOtherFailed = "not started: another process failed"

// launchWait bounds how long Start waits for the supervisor to say whether
// the worker's processes started.
const launchWait = 10 * time.Second

// awaitLaunch waits until the supervisor has recorded the worker's
// processes (pids.json) or its exit, and returns startFailure's verdict. A
// supervisor that records neither within launchWait counts as started: Wait
// and Status follow it from there.
func awaitLaunch(dir string, done <-chan struct{}) error {
	deadline := time.Now().Add(launchWait)
	for time.Now().Before(deadline) {
		if exists(filepath.Join(dir, filePIDs)) || exists(filepath.Join(dir, fileExit)) {
			return startFailure(dir)
		}
		select {
		case <-done: // the supervisor ended: its exit record is there, or never will be
			return startFailure(dir)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}
