package local

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// strayGrace is how long the supervisor waits, after the worker's processes
// have exited, for processes they left behind in the group to end after
// SIGTERM before it SIGKILLs them.
const strayGrace = 2 * time.Second

// Supervise runs the worker described by workerDir/launch.json and returns
// its exit code. trainq-worker calls it for `trainq-worker supervise <dir>`;
// the backend starts that command as the leader of a new session and process
// group, so the worker outlives the trainq-worker process that started it.
//
// The supervisor starts the worker's processes as children in its own process
// group, records their pids, waits for them and writes exit.json atomically.
// If a process fails, the others get SIGTERM, then SIGKILL after the plan's
// sibling grace. The worker's exit code is 0 if every process exited 0, else
// the code of the first process that failed (128+signal if killed).
//
// SIGTERM, SIGINT and SIGHUP are caught (not ignored, which would be inherited
// by the children): Stop signals the whole group, so the children receive the
// signal directly while the supervisor keeps waiting to record their exit.
func Supervise(workerDir string) int {
	sigc := make(chan os.Signal, 8)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigc)
	// A notice may come with SIGUSR1 or SIGUSR2 to the group (see
	// Backend.NoticeSignal); Go would ignore them, and the log says so.
	noticec := make(chan os.Signal, 8)
	signal.Notify(noticec, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(noticec)

	fail := func(code int, err error) int {
		fmt.Fprintf(os.Stderr, "[trainq-supervisor] %v\n", err)
		rec := exitRecord{ExitCode: code, EndedAt: time.Now().UTC(), Error: err.Error()}
		if werr := writeJSONAtomic(filepath.Join(workerDir, fileExit), rec); werr != nil {
			fmt.Fprintf(os.Stderr, "[trainq-supervisor] write exit status: %v\n", werr)
		}
		return code
	}

	var plan launchPlan
	ok, err := readJSON(filepath.Join(workerDir, fileLaunch), &plan)
	if err == nil && !ok {
		err = errors.New("no " + fileLaunch)
	}
	if err != nil {
		return fail(127, fmt.Errorf("read launch plan in %s: %w", workerDir, err))
	}
	// The backend records the pid right after starting us; do it too in case
	// it crashed in between, so that a restarted backend re-attaches.
	if pid, _ := readPID(workerDir); pid == 0 {
		if err := recordLaunch(workerDir, os.Getpid(), time.Now()); err != nil {
			fmt.Fprintf(os.Stderr, "[trainq-supervisor] record pid: %v\n", err)
		}
	}
	logf, err := os.OpenFile(plan.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fail(127, fmt.Errorf("open log: %w", err))
	}
	defer logf.Close()
	logln := func(format string, args ...any) {
		_, _ = fmt.Fprintf(logf, "[trainq-supervisor] "+format+"\n", args...)
	}
	logln("%s: starting %d process(es) at %s", plan.ID, len(plan.Procs), time.Now().UTC().Format(time.RFC3339))
	if err := becomeSubreaper(); err != nil {
		logln("cannot adopt the worker's orphans (%v): a process that leaves the group is found by its environment only", err)
	}

	type result struct {
		idx  int
		code int
		err  error
	}
	results := make(chan result, len(plan.Procs))
	exits := make([]procExit, len(plan.Procs))
	cmds := make([]*exec.Cmd, len(plan.Procs))
	done := make([]bool, len(plan.Procs))
	running := 0
	failed := -1 // index of the first process that failed
	var termTimer <-chan time.Time

	terminateOthers := func(sig syscall.Signal) {
		for i, c := range cmds {
			if c != nil && !done[i] {
				_ = c.Process.Signal(sig) // safe even if it has just been reaped
			}
		}
	}
	for i, p := range plan.Procs {
		exits[i] = procExit{LocalRank: p.LocalRank}
		if failed >= 0 {
			exits[i].ExitCode, exits[i].Error = 143, errTextOtherFailed
			continue
		}
		if len(p.Argv) == 0 {
			exits[i].ExitCode, exits[i].Error = 127, "empty argv"
			failed = i
			continue
		}
		c := exec.Command(p.Argv[0], p.Argv[1:]...)
		c.Env = mergeEnv(os.Environ(), p.Env)
		c.Stdout, c.Stderr = logf, logf
		if err := c.Start(); err != nil {
			logln("local_rank %d: start: %v", p.LocalRank, err)
			exits[i].ExitCode, exits[i].Error = 127, err.Error()
			failed = i
			continue
		}
		cmds[i] = c
		exits[i].PID = c.Process.Pid
		running++
		go func(i int, c *exec.Cmd) {
			err := c.Wait()
			code := 0
			if st := c.ProcessState; st != nil {
				code = exitCode(st.Sys().(syscall.WaitStatus))
			} else if err != nil {
				code = 127
			}
			results <- result{idx: i, code: code, err: err}
		}(i, c)
	}
	if err := writeJSONAtomic(filepath.Join(workerDir, filePIDs), exits); err != nil {
		logln("record process ids: %v", err)
	}
	if failed >= 0 && running > 0 {
		terminateOthers(syscall.SIGTERM)
		termTimer = time.After(plan.SiblingGrace)
	}

	// As subreaper the supervisor adopts the worker's orphans; those that
	// end are reaped as they do, not left as zombies for the worker's life.
	chldc := make(chan os.Signal, 1)
	signal.Notify(chldc, syscall.SIGCHLD)
	defer signal.Stop(chldc)
	own := map[int]bool{}
	for _, c := range cmds {
		if c != nil {
			own[c.Process.Pid] = true
		}
	}
	termReceived := false
	for running > 0 {
		select {
		case <-chldc:
			reapAdopted(own)
		case r := <-results:
			running--
			done[r.idx] = true
			exits[r.idx].ExitCode = r.code
			logln("local_rank %d (pid %d) exited with code %d", plan.Procs[r.idx].LocalRank, exits[r.idx].PID, r.code)
			if r.code != 0 && failed < 0 {
				failed = r.idx
				if running > 0 {
					logln("terminating the other processes")
					terminateOthers(syscall.SIGTERM)
					termTimer = time.After(plan.SiblingGrace)
				}
			}
		case s := <-sigc:
			// The group was signalled (Stop): the children got it too.
			termReceived = true
			logln("received %v", s)
		case s := <-noticec:
			logln("received %v with a notice; the processes got it too", s)
		case <-termTimer:
			logln("processes still running %v after a failure: SIGKILL", plan.SiblingGrace)
			terminateOthers(syscall.SIGKILL)
		}
	}

	leftovers := killStrays(logln, workerMark(filepath.Dir(plan.Log))) // the mark plan gave the processes

	rec := exitRecord{EndedAt: time.Now().UTC(), Processes: exits, TermReceived: termReceived, Leftovers: leftovers}
	if failed >= 0 {
		rec.ExitCode = exits[failed].ExitCode
		rec.Error = exits[failed].Error
	}
	logln("worker exited with code %d", rec.ExitCode)
	if err := writeJSONAtomic(filepath.Join(workerDir, fileExit), rec); err != nil {
		logln("write exit status: %v", err)
	}
	return rec.ExitCode
}

// killStrays ends processes the worker left behind (daemons, background
// jobs, processes that left the group with setsid), so that "exited" means
// the GPUs are free: SIGTERM to the group and to each of them (the supervisor
// catches it), then SIGKILL; then it reaps those the subreaper adopted.
// Linux only (needs /proc to find them); elsewhere Stop handles leftovers.
func killStrays(logln func(string, ...any), mark string) (leftovers []int) {
	self := os.Getpid()
	pgid := syscall.Getpgrp()
	defer reapAdopted(nil)
	strays := func() []int {
		return workerProcesses(self, pgid, self, mark)
	}
	left := strays()
	if len(left) == 0 {
		return nil
	}
	logln("terminating %d leftover process(es) %v", len(left), left)
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	for _, p := range left {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	deadline := time.Now().Add(strayGrace)
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		reapAdopted(nil)
		left = strays()
	}
	for range 50 {
		if len(left) == 0 {
			return nil
		}
		for _, p := range left {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
		reapAdopted(nil)
		left = strays()
	}
	if len(left) > 0 {
		logln("%d process(es) %v outlived SIGKILL (uninterruptible?); the worker's GPUs stay claimed while they live", len(left), left)
	}
	return left
}

// becomeSubreaper makes the supervisor the parent of the worker's orphans
// (PR_SET_CHILD_SUBREAPER), so that a process that daemonises is still found
// among its descendants (see killStrays).
func becomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// reapAdopted reaps the supervisor's ended children that are not its own
// processes (own, which their exec.Cmd waits for; nil once they are all
// waited for): the orphans it adopted as subreaper.
func reapAdopted(own map[int]bool) {
	self := os.Getpid()
	for _, pid := range childrenOf(self) {
		if own[pid] {
			continue
		}
		if st, ok := readStat(pid); ok && st.ppid == self && st.dead() {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
	}
}

// childrenOf lists pid's children from /proc/<pid>/task/*/children, or, where
// the kernel has no such file, every process (the caller checks the parent).
func childrenOf(pid int) []int {
	var out []int
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	if err == nil && len(tasks) > 0 {
		for _, t := range tasks {
			data, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(data)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
				}
			}
		}
		return out
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, e := range ents {
		if c, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, c)
		}
	}
	return out
}
