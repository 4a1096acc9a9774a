package local

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/trainq/trainq/cluster"
)

// Process inspection. Liveness is checked with kill(pid, 0) / kill(-pgid, 0);
// on Linux /proc refines it: zombies do not count as alive (a restarted
// trainq-worker is not their parent, and PID 1 in a container may never reap
// them), and a pid reused by another process is detected by its start time.

type procStat struct {
	state      byte
	ppid       int
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
	ppid, err0 := strconv.Atoi(f[1])
	pgrp, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err0 != nil || err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{state: f[0][0], ppid: ppid, pgrp: pgrp, startTicks: start}, true
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

// A worker's processes are those of its supervisor's process group, but a
// process can leave the group (setsid, a daemonising launcher) and outlive
// the supervisor's exit record, keeping its GPUs. Two more marks find it:
//   - it descends from the supervisor, which is a child subreaper: an orphan
//     of the worker is re-parented to the supervisor, not to init, while the
//     supervisor lives;
//   - its environment carries the worker's own $TRAINQ_NOTICE_FILE
//     (workerMark), which every process of the worker inherits unless it
//     clears its environment, and which outlives the supervisor.

// workerMark is the environment entry that marks the processes of the worker
// whose directory is dir.
func workerMark(dir string) string {
	return cluster.NoticeFileEnv + "=" + filepath.Join(dir, fileNotice)
}

// workerProcesses lists the live processes that belong to a worker, other
// than self: those of process group pgid (0: none), those that descend from
// ancestor (0: none) and those whose environment carries mark ("": none).
// Without /proc it finds none.
func workerProcesses(self, pgid, ancestor int, mark string) (pids []int) {
	processScans.Add(1)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	var live []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		st, ok := readStat(pid)
		if !ok || st.dead() {
			continue
		}
		parent[pid] = st.ppid
		if pgid > 0 && st.pgrp == pgid {
			pids = append(pids, pid)
			continue
		}
		live = append(live, pid)
	}
	descends := func(pid int) bool {
		for range 64 { // a chain longer than that is not worth following
			pp, ok := parent[pid]
			if !ok || pp <= 1 {
				return false
			}
			if pp == ancestor {
				return true
			}
			pid = pp
		}
		return false
	}
	for _, pid := range live {
		if (ancestor > 0 && descends(pid)) || (mark != "" && carries(pid, mark)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processScans counts workerProcesses' looks through every process: on a node
// with thousands of them each costs a good part of a second.
var processScans atomic.Int64

// carries says whether process pid's environment holds the entry mark.
func carries(pid int, mark string) bool {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for entry := range bytes.SplitSeq(env, []byte{0}) {
		if string(entry) == mark {
			return true
		}
	}
	return false
}

// markedAlive says whether a live process carries the worker's mark.
func markedAlive(dir string) bool {
	return len(workerProcesses(0, 0, 0, workerMark(dir))) > 0
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
