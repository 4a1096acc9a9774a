package testenv

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// This file checks trainq's core promise from what the job workers
// themselves recorded: every GPU has at most one holder at a time, and no
// worker of an attempt runs twice.
//
// Each worker of a chaos test's jobs appends one line when it starts and one
// when it exits:
//
//	start <job> <attempt> <worker> <node> <gpus> <unix-nanos>
//	end   <job> <attempt> <worker> <node> <gpus> <unix-nanos>
//
// where <gpus> is CUDA_VISIBLE_DEVICES (comma-separated indices). A worker
// killed with SIGKILL writes no end line; its hold then ends when the local
// backend recorded its exit (exit.json in its worker directory), or, failing
// that, at the end of the test: a hold is never assumed shorter than it may
// have been.

// WorkerKey names one worker of one attempt of a job.
type WorkerKey struct {
	Job     string
	Attempt int
	Worker  int
}

func (k WorkerKey) String() string {
	return fmt.Sprintf("%s attempt %d worker %d", k.Job, k.Attempt, k.Worker)
}

// HoldEvent is one line of a record file.
type HoldEvent struct {
	Start bool // false: an end line
	Key   WorkerKey
	Node  string
	GPUs  []int
	At    time.Time
	Line  int // 1-based line number in the file
}

// ParseHoldRecords reads a record file. Lines that are not well formed are
// returned as anomalies (with their line number) and otherwise ignored.
func ParseHoldRecords(r io.Reader) (events []HoldEvent, anomalies []string, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		ev, perr := parseHoldLine(text)
		if perr != nil {
			anomalies = append(anomalies, fmt.Sprintf("line %d %q: %v", line, text, perr))
			continue
		}
		ev.Line = line
		events = append(events, ev)
	}
	return events, anomalies, sc.Err()
}

func parseHoldLine(text string) (HoldEvent, error) {
	var ev HoldEvent
	f := strings.Fields(text)
	if len(f) != 7 {
		return ev, fmt.Errorf("want 7 fields (kind job attempt worker node gpus unix-nanos), got %d", len(f))
	}
	switch f[0] {
	case "start":
		ev.Start = true
	case "end":
	default:
		return ev, fmt.Errorf("kind %q is neither start nor end", f[0])
	}
	attempt, err1 := strconv.Atoi(f[2])
	worker, err2 := strconv.Atoi(f[3])
	nanos, err3 := strconv.ParseInt(f[6], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return ev, err
	}
	for _, g := range strings.Split(f[5], ",") {
		n, err := strconv.Atoi(g)
		if err != nil || n < 0 {
			return ev, fmt.Errorf("GPU index %q is not a number", g)
		}
		ev.GPUs = append(ev.GPUs, n)
	}
	ev.Key = WorkerKey{Job: f[1], Attempt: attempt, Worker: worker}
	ev.Node = f[4]
	ev.At = time.Unix(0, nanos)
	return ev, nil
}

// How a hold's end is known.
const (
	EndRecorded = "end line"
	EndExitFile = "exit record"
	EndTestEnd  = "end of test"
)

// Hold is the time one worker held its GPUs on its node.
type Hold struct {
	Key        WorkerKey
	Node       string
	GPUs       []int
	Start, End time.Time
	EndSource  string // EndRecorded, EndExitFile or EndTestEnd
}

func (h Hold) String() string {
	return fmt.Sprintf("%s on %s GPUs %v from %s to %s (%s)", h.Key, h.Node, h.GPUs,
		h.Start.Format("15:04:05.000"), h.End.Format("15:04:05.000"), h.EndSource)
}

// Overlap is two holds of one GPU (or more) of one node at the same time.
type Overlap struct {
	Node string
	GPUs []int // the indices both held
	A, B Hold  // A started first
}

func (o Overlap) String() string {
	return fmt.Sprintf("%s GPU %v: %s overlaps %s by %s", o.Node, o.GPUs, o.A, o.B, overlapLength(o.A, o.B).Round(time.Millisecond))
}

func overlapLength(a, b Hold) time.Duration {
	start, end := a.Start, a.End
	if b.Start.After(start) {
		start = b.Start
	}
	if b.End.Before(end) {
		end = b.End
	}
	return end.Sub(start)
}

// Duplicate is a worker of one attempt that started more than once.
type Duplicate struct {
	Key    WorkerKey
	Starts []HoldEvent
}

func (d Duplicate) String() string {
	var where []string
	for _, s := range d.Starts {
		where = append(where, fmt.Sprintf("%s GPUs %v at %s (line %d)", s.Node, s.GPUs, s.At.Format("15:04:05.000"), s.Line))
	}
	return fmt.Sprintf("%s started %d times: %s", d.Key, len(d.Starts), strings.Join(where, "; "))
}

// HoldReport is what CheckHolds found.
type HoldReport struct {
	Holds      []Hold
	Overlaps   []Overlap
	Duplicates []Duplicate
	// Unended are the holds with no end line (their end came from the exit
	// record or the end of the test).
	Unended []Hold
	// Anomalies are records that make no sense: malformed lines, end lines
	// without a start, an end before its start, an end on another node.
	Anomalies []string
}

// ExitTime returns when the local backend recorded the end of a worker
// (false if it has not).
type ExitTime func(WorkerKey) (time.Time, bool)

// CheckHolds pairs each start with the end of the same worker, builds the
// holds, and finds overlapping holds of a GPU and workers started twice.
// A start without an end line ends at exitTime's answer, else at testEnd.
func CheckHolds(events []HoldEvent, exitTime ExitTime, testEnd time.Time) HoldReport {
	var rep HoldReport
	starts := map[WorkerKey][]HoldEvent{}
	ends := map[WorkerKey][]HoldEvent{}
	var keys []WorkerKey
	for _, ev := range events {
		if ev.Start {
			if len(starts[ev.Key]) == 0 {
				keys = append(keys, ev.Key)
			}
			starts[ev.Key] = append(starts[ev.Key], ev)
		} else {
			ends[ev.Key] = append(ends[ev.Key], ev)
		}
	}
	for k, es := range ends {
		if len(starts[k]) == 0 {
			for _, e := range es {
				rep.Anomalies = append(rep.Anomalies, fmt.Sprintf("line %d: %s ended without a start line", e.Line, k))
			}
		}
	}
	for _, k := range keys {
		ss := sortedByTime(starts[k])
		es := sortedByTime(ends[k])
		if len(ss) > 1 {
			rep.Duplicates = append(rep.Duplicates, Duplicate{Key: k, Starts: ss})
		}
		if len(es) > len(ss) {
			rep.Anomalies = append(rep.Anomalies, fmt.Sprintf("%s has %d end lines for %d start lines", k, len(es), len(ss)))
		}
		// The i-th start pairs with the first unused end at or after it.
		used := make([]bool, len(es))
		for _, s := range ss {
			h := Hold{Key: k, Node: s.Node, GPUs: s.GPUs, Start: s.At}
			for i, e := range es {
				if used[i] || e.At.Before(s.At) {
					continue
				}
				used[i] = true
				h.End, h.EndSource = e.At, EndRecorded
				if e.Node != s.Node || !slices.Equal(e.GPUs, s.GPUs) {
					rep.Anomalies = append(rep.Anomalies, fmt.Sprintf("line %d: %s ended on %s GPUs %v but started on %s GPUs %v (line %d)",
						e.Line, k, e.Node, e.GPUs, s.Node, s.GPUs, s.Line))
				}
				break
			}
			if h.EndSource == "" {
				if t, ok := exitTime(k); ok && !t.Before(s.At) {
					h.End, h.EndSource = t, EndExitFile
				} else {
					h.End, h.EndSource = testEnd, EndTestEnd
				}
				rep.Unended = append(rep.Unended, h)
			}
			rep.Holds = append(rep.Holds, h)
		}
		for i, e := range es {
			if !used[i] && len(ss) > 0 && e.At.Before(ss[0].At) {
				rep.Anomalies = append(rep.Anomalies, fmt.Sprintf("line %d: %s ended before it started", e.Line, k))
			}
		}
	}
	rep.Overlaps = findOverlaps(rep.Holds)
	return rep
}

func sortedByTime(evs []HoldEvent) []HoldEvent {
	out := slices.Clone(evs)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// findOverlaps returns every pair of holds of different workers that held
// one GPU index of one node at the same time (a.Start < b.End and b.Start <
// a.End), one Overlap per pair with every GPU index they shared.
func findOverlaps(holds []Hold) []Overlap {
	type gpu struct {
		node string
		idx  int
	}
	byGPU := map[gpu][]int{}
	for i, h := range holds {
		for _, g := range h.GPUs {
			byGPU[gpu{h.Node, g}] = append(byGPU[gpu{h.Node, g}], i)
		}
	}
	type pair struct{ a, b int }
	shared := map[pair][]int{}
	var order []pair
	for g, idx := range byGPU {
		sort.Slice(idx, func(i, j int) bool { return holds[idx[i]].Start.Before(holds[idx[j]].Start) })
		for i, a := range idx {
			for _, b := range idx[i+1:] {
				if !holds[b].Start.Before(holds[a].End) {
					break // sorted by start: no later hold overlaps a either
				}
				if holds[a].Key == holds[b].Key {
					continue // a worker started twice: reported as a duplicate
				}
				p := pair{a, b}
				if _, ok := shared[p]; !ok {
					order = append(order, p)
				}
				shared[p] = append(shared[p], g.idx)
			}
		}
	}
	var out []Overlap
	for _, p := range order {
		g := shared[p]
		sort.Ints(g)
		out = append(out, Overlap{Node: holds[p.a].Node, GPUs: g, A: holds[p.a], B: holds[p.b]})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].A.Start.Equal(out[j].A.Start) {
			return out[i].A.Start.Before(out[j].A.Start)
		}
		return out[i].B.Start.Before(out[j].B.Start)
	})
	return out
}

// WorkerDir is where the local backend keeps one worker's state under dataDir.
func WorkerDir(dataDir string, k WorkerKey) string {
	return filepath.Join(dataDir, "jobs", k.Job, "attempt-"+strconv.Itoa(k.Attempt), "worker-"+strconv.Itoa(k.Worker))
}

// ExitTimes reads the end times the local backend recorded (exit.json's
// ended_at) under dataDir.
func ExitTimes(dataDir string) ExitTime {
	return func(k WorkerKey) (time.Time, bool) {
		b, err := os.ReadFile(filepath.Join(WorkerDir(dataDir, k), "exit.json"))
		if err != nil {
			return time.Time{}, false
		}
		var rec struct {
			EndedAt time.Time `json:"ended_at"`
		}
		if json.Unmarshal(b, &rec) != nil || rec.EndedAt.IsZero() {
			return time.Time{}, false
		}
		return rec.EndedAt, true
	}
}

// LiveWorker is a worker whose process group still has a live process.
type LiveWorker struct {
	Key  WorkerKey
	PGID int
	PIDs []int
}

// LiveWorkers lists the workers recorded under dataDir (their pid files)
// whose process group still has a live, non-zombie process. A pid now used
// by an unrelated process is told apart by its start time (started.json).
func LiveWorkers(dataDir string) ([]LiveWorker, error) {
	members, err := processGroups()
	if err != nil {
		return nil, err
	}
	pidFiles, err := filepath.Glob(filepath.Join(dataDir, "jobs", "*", "attempt-*", "worker-*", "pid"))
	if err != nil {
		return nil, err
	}
	var out []LiveWorker
	for _, p := range pidFiles {
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		pgid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pgid <= 1 {
			continue
		}
		live := members[pgid]
		if len(live) == 0 {
			continue
		}
		dir := filepath.Dir(p)
		if leaderReused(dir, pgid) {
			continue
		}
		k, ok := keyOfWorkerDir(dataDir, dir)
		if !ok {
			continue
		}
		out = append(out, LiveWorker{Key: k, PGID: pgid, PIDs: live})
	}
	return out, nil
}

// processGroups maps each process group to its live (non-zombie) members.
func processGroups() (map[int][]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := readProcStat(pid)
		if !ok || st.state == 'Z' || st.state == 'X' {
			continue
		}
		out[st.pgrp] = append(out[st.pgrp], pid)
	}
	return out, nil
}

// leaderReused reports whether pid is alive but is not the process the
// backend started (its start time differs from started.json's).
func leaderReused(dir string, pid int) bool {
	var rec struct {
		PID        int    `json:"pid"`
		StartTicks uint64 `json:"start_ticks"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "started.json"))
	if err != nil || json.Unmarshal(b, &rec) != nil || rec.PID != pid || rec.StartTicks == 0 {
		return false
	}
	st, ok := readProcStat(pid)
	return ok && st.startTicks != rec.StartTicks
}

func keyOfWorkerDir(dataDir, dir string) (WorkerKey, bool) {
	rel, err := filepath.Rel(filepath.Join(dataDir, "jobs"), dir)
	if err != nil {
		return WorkerKey{}, false
	}
	parts := strings.Split(rel, string(filepath.Separator))
	if len(parts) != 3 {
		return WorkerKey{}, false
	}
	a, ok1 := strings.CutPrefix(parts[1], "attempt-")
	w, ok2 := strings.CutPrefix(parts[2], "worker-")
	attempt, err1 := strconv.Atoi(a)
	worker, err2 := strconv.Atoi(w)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return WorkerKey{}, false
	}
	return WorkerKey{Job: parts[0], Attempt: attempt, Worker: worker}, true
}

type procStat struct {
	state      byte
	pgrp       int
	startTicks uint64
}

func readProcStat(pid int) (procStat, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(data[i+1:]))
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

// KillWorkerGroups SIGKILLs the process groups of the given workers.
func KillWorkerGroups(ws []LiveWorker) {
	for _, w := range ws {
		_ = syscall.Kill(-w.PGID, syscall.SIGKILL)
	}
}
