package local

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Process inspection. Liveness is checked with kill(pid, 0) / kill(-pgid, 0);
// on Linux /proc refines it: zombies do not count as alive (a restarted
// trainq-worker is not their parent, and PID 1 in a container may never reap
// them), and a pid reused by another process is detected by its start time.

type procStat struct {
	state      byte
	pgrp       int
	startTicks uint64
}

// readStat parses /proc/<pid>/stat; ok is false if it is unavailable.
func readStat(pid int) (procStat, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// comm is in parentheses and may contain spaces: parse after the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0]=state(3) f[1]=ppid(4) f[2]=pgrp(5) ... f[19]=starttime(22)
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, false
	}
	pgrp, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{state: f[0][0], pgrp: pgrp, startTicks: start}, true
}

func (s procStat) dead() bool { return s.state == 'Z' || s.state == 'X' }

// groupMembers lists the live (non-zombie) processes whose process group is
// pgid. ok is false if /proc cannot be read.
func groupMembers(pgid int) (pids []int, ok bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := readStat(pid)
		if ok && st.pgrp == pgid && !st.dead() {
			pids = append(pids, pid)
		}
	}
	return pids, true
}

// pgroupAlive reports whether any live process is in process group pgid.
func pgroupAlive(pgid int) bool {
	if pgid <= 1 {
		return false
	}
	if err := syscall.Kill(-pgid, 0); err == syscall.ESRCH {
		return false
	}
	if members, ok := groupMembers(pgid); ok {
		return len(members) > 0
	}
	return true // EPERM or success, no /proc: assume alive
}

// groupAlive reports whether the supervisor's process group recorded in info
// still has a live process. It returns false if the machine rebooted or the
// supervisor pid now belongs to another process (then the group is gone:
// Linux does not reuse a pid while it is in use as a process group id).
func groupAlive(info *procInfo) bool {
	if info == nil {
		return false
	}
	if info.BootID != "" {
		if cur := bootID(); cur != "" && cur != info.BootID {
			return false
		}
	}
	if info.StartTicks != 0 {
		if st, ok := readStat(info.PID); ok && st.startTicks != info.StartTicks {
			return false
		}
	}
	return pgroupAlive(info.PID)
}

func bootID() string {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// exitCode converts a wait status to a shell-style exit code (128+signal).
func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// mergeEnv returns base with the variables in extra added, replacing any
// variable of the same name in base.
func mergeEnv(base, extra []string) []string {
	set := make(map[string]bool, len(extra))
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !set[k] {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}
