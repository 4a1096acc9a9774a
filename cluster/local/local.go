// Package local is the embedded cluster backend: it runs each worker as an
// OS process group on this machine.
//
// Everything about a worker lives on disk under
// <DataDir>/jobs/<job>/attempt-<n>/worker-<w>/ (spec.json, launch.json, pid,
// started.json, pids.json, worker.log, exit.json, stop.json), and nothing
// about it in memory, so a restarted trainq-worker re-attaches to the workers
// a previous process started: Start finds the pid file and starts nothing,
// Wait and Status check the recorded process group with kill(-pgid, 0) and
// read exit.json, which the worker's supervisor writes when it ends.
// spec.json records the node and GPUs a worker was started with, which is
// how LiveWorkers finds a node's live workers; the log's modification time
// is LastOutput.
//
// Each worker is a supervisor process (`trainq-supervise <dir>`, or
// `trainq-worker supervise <dir>` where that binary is missing; see
// Supervise) started with setsid, so it leads its own session and process
// group and survives the trainq-worker process; the job's processes are its
// children in the same group.
package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/cluster/local/logfile"
)

// Options configures the local backend.
type Options struct {
	// DataDir holds jobs/ (worker state and logs) and checkpoints/. Required.
	DataDir string
	// SupervisorArgv is the command that runs Supervise; the worker directory
	// is appended. Default: the trainq-supervise binary next to the running
	// executable if there is one (SupervisorBinary), else
	// [os.Executable(), "supervise"].
	SupervisorArgv []string
	// PollInterval is how often Wait checks a worker (and heartbeats).
	// Default 500ms.
	PollInterval time.Duration
	// Python runs the scripts of Python job types. Default "python3".
	Python string
	// SiblingGrace is how long the other processes of a worker get after
	// SIGTERM when one of them failed, before SIGKILL. Default 10s.
	SiblingGrace time.Duration
}

// SupervisorBinary is the small binary that runs Supervise alone
// (./cmd/trainq-supervise): it starts in a fraction of the CPU and memory that the
// whole trainq-worker takes, once per worker started.
const SupervisorBinary = "trainq-supervise"

// defaultSupervisor is SupervisorBinary next to the running executable,
// or the executable itself with the supervise subcommand.
func defaultSupervisor() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("local backend: find own executable for the supervisor: %w", err)
	}
	return supervisorNextTo(exe), nil
}

func supervisorNextTo(exe string) []string {
	small := filepath.Join(filepath.Dir(exe), SupervisorBinary)
	if info, err := os.Stat(small); err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0 {
		return []string{small}
	}
	return []string{exe, "supervise"}
}

// Backend is the local cluster backend. It is safe for concurrent use, and
// several Backends (in one or several processes) may share a DataDir.
type Backend struct {
	opts Options

	mu   sync.Mutex
	done map[string]chan struct{} // closed when a supervisor this process started is reaped
}

var (
	_ cluster.Backend        = (*Backend)(nil)
	_ cluster.Lister         = (*Backend)(nil)
	_ cluster.Inventory      = (*Backend)(nil)
	_ cluster.OutputClock    = (*Backend)(nil)
	_ cluster.LogSource      = (*Backend)(nil)
	_ cluster.NotebookProber = (*Backend)(nil)
	_ cluster.LogNoter       = (*Backend)(nil)
)

// New returns a local backend storing its state under opts.DataDir.
func New(opts Options) (*Backend, error) {
	if opts.DataDir == "" {
		return nil, errors.New("local backend: DataDir is required")
	}
	dir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("local backend: data dir: %w", err)
	}
	opts.DataDir = dir
	if err := os.MkdirAll(filepath.Join(dir, "jobs"), 0o755); err != nil {
		return nil, fmt.Errorf("local backend: %w", err)
	}
	if len(opts.SupervisorArgv) == 0 {
		argv, err := defaultSupervisor()
		if err != nil {
			return nil, err
		}
		opts.SupervisorArgv = argv
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 500 * time.Millisecond
	}
	if opts.Python == "" {
		opts.Python = "python3"
	}
	if opts.SiblingGrace <= 0 {
		opts.SiblingGrace = 10 * time.Second
	}
	return &Backend{opts: opts, done: map[string]chan struct{}{}}, nil
}

// DataDir returns the absolute data directory.
func (b *Backend) DataDir() string { return b.opts.DataDir }

func (b *Backend) attemptDir(job string, attempt int) (string, error) {
	return logfile.AttemptDir(b.opts.DataDir, job, attempt)
}

// WorkerDir returns the directory holding the worker's state and log.
func (b *Backend) WorkerDir(id cluster.WorkerID) (string, error) {
	return logfile.WorkerDir(b.opts.DataDir, id)
}

// LogPath returns the path of the worker's log file (it may not exist yet).
func (b *Backend) LogPath(id cluster.WorkerID) (string, error) {
	return logfile.Path(b.opts.DataDir, id)
}

// CheckpointDir returns the default checkpoint directory of a job, shared by
// all its attempts: <DataDir>/checkpoints/<job>.
func (b *Backend) CheckpointDir(job string) (string, error) {
	if err := cluster.ValidJobName(job); err != nil {
		return "", err
	}
	return filepath.Join(b.opts.DataDir, "checkpoints", job), nil
}

type rendezvous struct {
	Addr string `json:"addr"`
	Port int    `json:"port"`
}

// Rendezvous returns 127.0.0.1 and a port that was free when first asked,
// persisted in the attempt directory so later calls (from any process) get
// the same answer.
func (b *Backend) Rendezvous(ctx context.Context, job string, attempt int) (string, int, error) {
	dir, err := b.attemptDir(job, attempt)
	if err != nil {
		return "", 0, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return "", 0, err
	}
	defer unlock()
	path := filepath.Join(dir, fileRendezvous)
	var rv rendezvous
	if ok, err := readJSON(path, &rv); err != nil {
		return "", 0, err
	} else if ok && rv.Port > 0 {
		return rv.Addr, rv.Port, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", 0, fmt.Errorf("find a free port: %w", err)
	}
	rv = rendezvous{Addr: "127.0.0.1", Port: l.Addr().(*net.TCPAddr).Port}
	_ = l.Close()
	if err := writeJSONAtomic(path, rv); err != nil {
		return "", 0, err
	}
	return rv.Addr, rv.Port, nil
}

// plan builds the commands of a worker. binary/nogpu run
// `/bin/sh -c '<script> --k=v ...'`; Python types run Processes() copies of
// `exec <python> <script> --k=v ...` through /bin/sh, so the script may carry
// its own arguments ("train.py --epochs 3"). Flag values are shell-quoted.
func (b *Backend) plan(spec cluster.WorkerSpec, logPath, notebookToken string) launchPlan {
	var flags strings.Builder
	for _, f := range spec.FlagArgs() {
		flags.WriteByte(' ')
		flags.WriteString(shellQuote(f))
	}
	p := launchPlan{ID: spec.ID, Log: logPath, SiblingGrace: b.opts.SiblingGrace}
	python := cluster.IsPythonType(spec.Type)
	for r := range spec.Processes() {
		var line string
		if python {
			line = "exec " + shellQuote(b.opts.Python) + " " + spec.Script + flags.String()
		} else {
			line = spec.Script + flags.String()
		}
		env := spec.Environment(r)
		if python {
			if _, set := spec.Env["PYTHONUNBUFFERED"]; !set {
				env = append(env, "PYTHONUNBUFFERED=1")
			}
		}
		if spec.Notebook {
			env = append(env, cluster.NotebookPortEnv+"="+strconv.Itoa(spec.MasterPort), cluster.NotebookTokenEnv+"="+notebookToken)
			if _, set := spec.Env[cluster.JupyterTokenEnv]; !set {
				env = append(env, cluster.JupyterTokenEnv+"="+notebookToken)
			}
		}
		env = append(env, workerMark(filepath.Dir(logPath)))
		p.Procs = append(p.Procs, procPlan{LocalRank: r, Argv: []string{"/bin/sh", "-c", spec.InConda(line)}, Env: env})
	}
	return p
}

// Start launches the worker's supervisor unless this worker was already
// launched (by this or an earlier process), in which case it returns the
// current status. If spec.MasterAddr/MasterPort are empty it uses
// Rendezvous; if spec.CheckpointDir is empty it uses CheckpointDir(job). The
// checkpoint directory is created.
func (b *Backend) Start(ctx context.Context, spec cluster.WorkerSpec) (cluster.WorkerStatus, error) {
	if err := spec.Validate(); err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, err
	}
	dir, err := b.WorkerDir(spec.ID)
	if err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, err
	}
	defer unlock()

	if b.launched(dir) {
		st, err := b.Status(ctx, spec.ID)
		if err == nil {
			err = startFailure(dir) // a retried Start gives the same answer
		}
		var rec notebookRecord
		if spec.Notebook {
			_, _ = readJSON(filepath.Join(dir, fileNotebook), &rec) // none: a URL without its token
		}
		st.URL = notebookURL(spec, rec.Token)
		return st, err
	}
	if spec.MasterAddr == "" || spec.MasterPort == 0 {
		addr, port, err := b.Rendezvous(ctx, spec.ID.Job, spec.ID.Attempt)
		if err != nil {
			return cluster.WorkerStatus{ID: spec.ID}, err
		}
		spec.MasterAddr, spec.MasterPort = addr, port
	}
	unlockGPUs, err := b.claimGPUs(spec)
	if err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, err
	}
	defer unlockGPUs()
	if spec.CheckpointDir == "" {
		spec.CheckpointDir, _ = b.CheckpointDir(spec.ID.Job)
	}
	if err := os.MkdirAll(spec.CheckpointDir, 0o755); err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, fmt.Errorf("checkpoint dir: %w", err)
	}
	logPath := filepath.Join(dir, fileLog)
	var token string
	if spec.Notebook {
		// The token trainq reads the server's status with (see
		// NotebookStatus), recorded before the server can start.
		if token, err = newNotebookToken(); err == nil {
			err = writeJSONAtomic(filepath.Join(dir, fileNotebook), notebookRecord{Token: token})
		}
		if err != nil {
			return cluster.WorkerStatus{ID: spec.ID}, fmt.Errorf("notebook token: %w", err)
		}
	}
	plan := b.plan(spec, logPath, token)
	// A command the OS cannot exec would only show as exit code 127 with
	// the reason in the log: say it here, before anything starts.
	if err := checkExec(plan, os.Environ()); err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, err
	}
	if err := writeJSONAtomic(filepath.Join(dir, fileSpec), spec); err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, err
	}
	if err := writeJSONAtomic(filepath.Join(dir, fileLaunch), plan); err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, err
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, err
	}
	argv := append(append([]string(nil), b.opts.SupervisorArgv...), dir)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf // *os.File: inherited directly, no copying goroutine
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	startedAt := time.Now()
	err = cmd.Start()
	_ = logf.Close() // the supervisor has its own descriptor
	if err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, fmt.Errorf("start supervisor %v: %w", argv, err)
	}
	// Reap the supervisor if it ends while we are alive, and wake Wait.
	done := make(chan struct{})
	key := spec.ID.String()
	b.mu.Lock()
	b.done[key] = done
	b.mu.Unlock()
	go func() {
		_ = cmd.Wait() // reaps it: how the worker ended is in its files
		close(done)
		b.mu.Lock()
		if b.done[key] == done {
			delete(b.done, key)
		}
		b.mu.Unlock()
	}()
	if err := recordLaunch(dir, cmd.Process.Pid, startedAt); err != nil {
		// Without a pid file nobody could find or stop it: kill it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return cluster.WorkerStatus{ID: spec.ID}, fmt.Errorf("record worker pid: %w", err)
	}
	// A process that could not be started at all (exec failed) is an error
	// of Start with the real reason, not a mere exit code 127 later.
	failed := awaitLaunch(dir, done)
	st, err := b.Status(ctx, spec.ID)
	if err == nil {
		err = failed
	}
	st.URL = notebookURL(spec, token)
	return st, err
}

// notebookURL is where a Jupyter server started from spec serves: the
// rendezvous address (the node's address) and port, which the server gets
// as TRAINQ_NOTEBOOK_PORT. Other workers have none. Unless the user set
// JUPYTER_TOKEN themselves, the server's token is trainq's (token), and the
// URL carries it so that the user can log in, as Jupyter's own start-up
// link does; with theirs, they log in with it.
func notebookURL(spec cluster.WorkerSpec, token string) string {
	if !spec.Notebook || spec.MasterAddr == "" || spec.MasterPort == 0 {
		return ""
	}
	u := "http://" + net.JoinHostPort(spec.MasterAddr, strconv.Itoa(spec.MasterPort)) + "/"
	if _, own := spec.Env[cluster.JupyterTokenEnv]; token != "" && !own {
		u += "?token=" + token
	}
	return u
}

// launched reports whether the worker was started before. A spec.json
// without pid means an earlier Start died between writing it and recording
// the pid; the supervisor records its own pid at once, so give it a moment.
func (b *Backend) launched(dir string) bool {
	if exists(filepath.Join(dir, filePID)) || exists(filepath.Join(dir, fileExit)) {
		return true
	}
	if !exists(filepath.Join(dir, fileSpec)) {
		return false
	}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		if exists(filepath.Join(dir, filePID)) || exists(filepath.Join(dir, fileExit)) {
			return true
		}
	}
	return false
}

// Status returns the worker's status from its directory. A worker whose
// process group is gone without an exit record was killed by a signal
// (SIGKILL, reboot): it is reported, and recorded, as exited with code 137
// and Signaled.
func (b *Backend) Status(ctx context.Context, id cluster.WorkerID) (cluster.WorkerStatus, error) {
	st := cluster.WorkerStatus{ID: id, Phase: cluster.PhaseNotFound}
	dir, err := b.WorkerDir(id)
	if err != nil {
		return st, err
	}
	info, err := readProcInfo(dir)
	if err != nil {
		return st, err
	}
	// Liveness before the exit file: the supervisor writes exit.json before
	// it dies, so a dead group without exit.json really has no exit record.
	alive := groupAlive(info)
	var rec exitRecord
	hasExit, err := readJSON(filepath.Join(dir, fileExit), &rec)
	if err != nil {
		return st, err
	}
	if info == nil && !hasExit {
		return st, nil
	}
	st.LogPath = filepath.Join(dir, fileLog)
	st.StopRequested = exists(filepath.Join(dir, fileStop))
	if info != nil {
		st.PID = info.PID
		st.StartedAt = info.StartedAt
	}
	if !hasExit && alive {
		st.Phase = cluster.PhaseRunning
		return st, nil
	}
	if !hasExit {
		// The supervisor died without ending what left the group (see
		// workerMark): end that first, so that an exit record always means
		// the worker's GPUs are free.
		if escaped := workerProcesses(0, 0, 0, workerMark(dir)); len(escaped) > 0 {
			for _, pid := range escaped {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			st.Phase = cluster.PhaseRunning
			return st, nil
		}
		rec = exitRecord{ExitCode: 128 + int(syscall.SIGKILL), EndedAt: time.Now().UTC(), Killed: true,
			Error: "process group gone without an exit record (killed)"}
		if err := writeJSONAtomic(filepath.Join(dir, fileExit), rec); err != nil {
			return st, err
		}
	}
	st.Phase = cluster.PhaseExited
	st.ExitCode = rec.ExitCode
	st.EndedAt = rec.EndedAt
	st.Signaled = st.StopRequested || rec.Killed
	return st, nil
}

// Wait polls the worker every PollInterval until it exits, calling heartbeat
// with the status while it runs. It works on workers started by another
// process: it uses the pid files and exit.json, not os.Process.Wait.
func (b *Backend) Wait(ctx context.Context, id cluster.WorkerID, heartbeat func(cluster.WorkerStatus)) (cluster.WorkerStatus, error) {
	ticker := time.NewTicker(b.opts.PollInterval)
	defer ticker.Stop()
	for {
		st, err := b.Status(ctx, id)
		if err != nil {
			return st, err
		}
		switch st.Phase {
		case cluster.PhaseNotFound:
			return st, fmt.Errorf("%w: %s", cluster.ErrNotFound, id)
		case cluster.PhaseExited:
			return st, nil
		}
		if heartbeat != nil {
			heartbeat(st)
		}
		b.mu.Lock()
		done := b.done[id.String()] // nil (never ready) unless we started it
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-ticker.C:
		case <-done:
		}
	}
}

// Stop sends SIGTERM to the worker's process group, waits up to grace for
// the group to end, then sends SIGKILL, and returns once no process of the
// group is alive (or ctx is done). It records the stop first, so the status
// says Signaled/StopRequested. Stopping a worker that exited or was never
// started returns its status at once.
func (b *Backend) Stop(ctx context.Context, id cluster.WorkerID, grace time.Duration) (cluster.WorkerStatus, error) {
	st, err := b.Status(ctx, id)
	if err != nil || st.Phase == cluster.PhaseNotFound {
		return st, err
	}
	dir, _ := b.WorkerDir(id)
	info, err := readProcInfo(dir)
	if err != nil || info == nil {
		return st, err
	}
	poll := min(b.opts.PollInterval, 50*time.Millisecond)
	// The supervisor of a worker this process started ends right after
	// the group: waking on its end saves up to a poll per stop (the
	// capacity is released that much sooner).
	b.mu.Lock()
	supervisorDone := b.done[id.String()]
	b.mu.Unlock()
	if st.Phase == cluster.PhaseRunning {
		if !exists(filepath.Join(dir, fileStop)) {
			if err := writeJSONAtomic(filepath.Join(dir, fileStop), stopRecord{RequestedAt: time.Now().UTC(), Grace: grace}); err != nil {
				return st, err
			}
		}
		if groupAlive(info) {
			// What left the group is the worker's too: it gets the
			// same chance to stop gracefully.
			for _, pid := range workerProcesses(info.PID, 0, info.PID, workerMark(dir)) {
				if st, ok := readStat(pid); ok && st.pgrp != info.PID { // the group's get it once, below
					_ = syscall.Kill(pid, syscall.SIGTERM)
				}
			}
			_ = syscall.Kill(-info.PID, syscall.SIGTERM)
		}
		deadline := time.Now().Add(grace)
		for groupAlive(info) && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return st, ctx.Err()
			case <-time.After(poll):
			case <-supervisorDone:
				supervisorDone = nil // closed: from now on, poll
			}
		}
	}
	// SIGKILL whatever is left (also leftovers of an exited worker), and
	// what escaped the group (see workerMark): while the supervisor lives,
	// its descendants first, since once it is killed they are init's and
	// only the mark in their environment still tells them.
	for {
		alive := groupAlive(info)
		ancestor := 0
		if alive {
			ancestor = info.PID
		}
		escaped := workerProcesses(0, 0, ancestor, workerMark(dir))
		for _, pid := range escaped {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if alive {
			_ = syscall.Kill(-info.PID, syscall.SIGKILL)
		}
		if !alive && len(escaped) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(poll):
		}
	}
	return b.Status(ctx, id)
}

// Logs copies the worker's log, or its last tail lines, to w.
func (b *Backend) Logs(ctx context.Context, id cluster.WorkerID, tail int, w io.Writer) error {
	path, err := b.LogPath(id)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		if st, serr := b.Status(ctx, id); serr == nil && st.Phase == cluster.PhaseNotFound {
			return fmt.Errorf("%w: %s", cluster.ErrNotFound, id)
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return tailLines(f, fi.Size(), tail, w)
}

// ReadLog reads a chunk of the worker's log file (see cluster.LogReader
// and logfile.Source, which the CLI and the API use without a backend).
// A launched worker without a log yet gives an empty chunk.
func (b *Backend) ReadLog(ctx context.Context, req cluster.LogRequest) (cluster.LogChunk, error) {
	return logfile.Source{DataDir: b.opts.DataDir}.ReadLog(ctx, req)
}

// Reachable says whether the backend's data dir exists (see
// cluster.LogSource): the backend is a log source of its own workers.
func (b *Backend) Reachable() error { return logfile.Source{DataDir: b.opts.DataDir}.Reachable() }

// List returns the status of every worker of every attempt of job found on
// disk, ordered by attempt then worker.
func (b *Backend) List(ctx context.Context, job string) ([]cluster.WorkerStatus, error) {
	if err := cluster.ValidJobName(job); err != nil {
		return nil, err
	}
	ids, err := b.jobWorkers(job)
	if err != nil {
		return nil, err
	}
	var out []cluster.WorkerStatus
	for _, id := range ids {
		st, err := b.Status(ctx, id)
		if err != nil {
			return out, err
		}
		if st.Phase != cluster.PhaseNotFound {
			out = append(out, st)
		}
	}
	return out, nil
}

// jobWorkers lists the worker directories of every attempt of job, ordered
// by attempt then worker. Names that are not attempt-<n>/worker-<w>
// directories are skipped.
func (b *Backend) jobWorkers(job string) ([]cluster.WorkerID, error) {
	attempts, err := os.ReadDir(filepath.Join(b.opts.DataDir, "jobs", job))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []cluster.WorkerID
	for _, a := range attempts {
		n, ok := strings.CutPrefix(a.Name(), "attempt-")
		attempt, err := strconv.Atoi(n)
		if !ok || err != nil || attempt < 0 || !a.IsDir() {
			continue
		}
		workers, err := os.ReadDir(filepath.Join(b.opts.DataDir, "jobs", job, a.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		for _, wd := range workers {
			n, ok := strings.CutPrefix(wd.Name(), "worker-")
			worker, err := strconv.Atoi(n)
			if ok && err == nil && worker >= 0 && wd.IsDir() {
				ids = append(ids, cluster.WorkerID{Job: job, Attempt: attempt, Worker: worker})
			}
		}
	}
	sort.Slice(ids, func(i, j int) bool {
		if ids[i].Attempt != ids[j].Attempt {
			return ids[i].Attempt < ids[j].Attempt
		}
		return ids[i].Worker < ids[j].Worker
	})
	return ids, nil
}

// placement is the part of spec.json that says where a worker runs. State
// written before a field existed decodes with it empty.
type placement struct {
	Node string `json:"node"`
	GPUs []int  `json:"gpus"`
}

// LiveWorkers returns every worker on disk whose spec.json names node and
// whose process group still has a live process, ordered by job, attempt and
// worker, with the node and GPUs from spec.json. A group that is alive after
// its worker recorded its exit (a leftover process) counts as live: it may
// still hold the GPUs. A worker whose spec.json names no node (hand-made
// state) belongs to no node and is never listed.
func (b *Backend) LiveWorkers(ctx context.Context, node string) ([]cluster.PlacedWorker, error) {
	if node == "" {
		return nil, errors.New("live workers: node must not be empty")
	}
	jobs, err := os.ReadDir(filepath.Join(b.opts.DataDir, "jobs"))
	if err != nil {
		return nil, err
	}
	var out []cluster.PlacedWorker // os.ReadDir sorts by name: jobs come in order
	for _, j := range jobs {
		if !j.IsDir() || cluster.ValidJobName(j.Name()) != nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		ids, err := b.jobWorkers(j.Name())
		if err != nil {
			return out, err
		}
		for _, id := range ids {
			dir, err := b.WorkerDir(id)
			if err != nil {
				continue
			}
			info, err := readProcInfo(dir)
			if err != nil {
				return out, fmt.Errorf("%s: %w", id, err)
			}
			if !groupAlive(info) { // also nil info: never launched
				continue
			}
			var p placement
			if _, err := readJSON(filepath.Join(dir, fileSpec), &p); err != nil {
				return out, fmt.Errorf("%s: %w", id, err)
			}
			if p.Node != node {
				continue
			}
			st, err := b.Status(ctx, id)
			if err != nil {
				return out, err
			}
			out = append(out, cluster.PlacedWorker{WorkerStatus: st, Node: p.Node, GPUs: p.GPUs})
		}
	}
	return out, nil
}

// LastOutput returns the modification time of the worker's log: every
// process of the worker appends to it, so it moves with each line written.
// A launched worker without a log yet gives the zero time; a worker never
// started is cluster.ErrNotFound.
func (b *Backend) LastOutput(ctx context.Context, id cluster.WorkerID) (time.Time, error) {
	path, err := b.LogPath(id)
	if err != nil {
		return time.Time{}, err
	}
	fi, err := os.Stat(path)
	if err == nil {
		return fi.ModTime(), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return time.Time{}, err
	}
	st, serr := b.Status(ctx, id)
	if serr != nil {
		return time.Time{}, serr
	}
	if st.Phase == cluster.PhaseNotFound {
		return time.Time{}, fmt.Errorf("%w: %s", cluster.ErrNotFound, id)
	}
	return time.Time{}, nil
}
