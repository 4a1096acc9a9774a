// Package cluster defines how trainq starts, watches and stops the workers of
// a training job on GPU nodes. Temporal activities call a Backend, of which
// there are two: package cluster/local runs each worker as an OS process group
// on this machine, and package cluster/kube runs each worker as a pod, bound
// to its granted node, on a Kubernetes cluster.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// WorkerID names one worker of one attempt of one job.
type WorkerID struct {
	Job     string `json:"job"`
	Attempt int    `json:"attempt"`
	Worker  int    `json:"worker"`
}

func (id WorkerID) String() string {
	return fmt.Sprintf("%s/attempt-%d/worker-%d", id.Job, id.Attempt, id.Worker)
}

// Validate checks the job name (see ValidJobName) and that attempt and worker
// are not negative.
func (id WorkerID) Validate() error {
	if err := ValidJobName(id.Job); err != nil {
		return err
	}
	if id.Attempt < 0 {
		return fmt.Errorf("attempt: must be >= 0, got %d", id.Attempt)
	}
	if id.Worker < 0 {
		return fmt.Errorf("worker: must be >= 0, got %d", id.Worker)
	}
	return nil
}

// WorkerSpec is everything needed to start one worker on one node.
type WorkerSpec struct {
	ID                 WorkerID          `json:"id"`
	Workers            int               `json:"workers"` // n_workers of the job (world size in nodes)
	Node               string            `json:"node"`
	GPUs               []int             `json:"gpus"`                 // -> CUDA_VISIBLE_DEVICES="0,1"
	Type               string            `json:"type"`                 // binary | pytorch | pytorch2 | torchrun | horovod | pytorch_elastic | nogpu
	Script             string            `json:"script"`               // shell fragment: a command line (binary, nogpu) or a script path plus optional args (python types)
	BaseImage          string            `json:"base_image,omitempty"` // recorded, not used by local backend
	ProcessesPerWorker int               `json:"processes_per_worker"` // >=1
	Env                map[string]string `json:"env,omitempty"`
	Flags              map[string]string `json:"flags,omitempty"`
	MasterAddr         string            `json:"master_addr"`
	MasterPort         int               `json:"master_port"`
	CheckpointDir      string            `json:"checkpoint_dir,omitempty"`
	// Notebook: the worker is a Jupyter server; it listens on
	// TRAINQ_NOTEBOOK_PORT and its status carries its URL.
	Notebook bool `json:"notebook,omitempty"`
	// CondaEnv is a conda environment (a name, or a path if it has a '/')
	// the worker's command runs in (see InConda).
	CondaEnv string `json:"conda_env,omitempty"`
	// ShmGB sizes the worker's /dev/shm (ML Space's shm_size_class times
	// its GPUs): a memory emptyDir on Kubernetes; the local backend leaves
	// the host's. 0: the runtime's default.
	ShmGB int `json:"shm_gb,omitempty"`
	// NoInternet is ML Space's internet: false. Kubernetes pods get the
	// label trainq.io/internet=false, for a NetworkPolicy to select.
	NoInternet bool `json:"no_internet,omitempty"`
	// ElasticMinWorkers..ElasticMaxWorkers and ElasticMaxRestarts are a
	// pytorch_elastic job's torchrun settings (0: not elastic).
	ElasticMinWorkers  int `json:"elastic_min_workers,omitempty"`
	ElasticMaxWorkers  int `json:"elastic_max_workers,omitempty"`
	ElasticMaxRestarts int `json:"elastic_max_restarts,omitempty"`
}

// InConda wraps a shell command line so that it runs in the spec's conda
// environment, failing the worker with a sentence that names the
// environment and the node when conda or the environment is missing. A spec
// without CondaEnv gets line back.
func (s WorkerSpec) InConda(line string) string {
	if s.CondaEnv == "" {
		return line
	}
	which := "-n"
	if strings.Contains(s.CondaEnv, "/") {
		which = "-p"
	}
	env := shellQuote(s.CondaEnv)
	return fmt.Sprintf("if ! command -v conda >/dev/null 2>&1; then echo %s >&2; exit 127; fi\n"+
		"if ! conda run %s %s true >/dev/null 2>&1; then echo %s >&2; exit 127; fi\n"+
		"exec conda run --no-capture-output %s %s /bin/sh -c %s",
		shellQuote(fmt.Sprintf("trainq: conda_env %s: conda is not installed on node %s", s.CondaEnv, s.Node)),
		which, env, shellQuote(fmt.Sprintf("trainq: conda_env %s: no such conda environment on node %s", s.CondaEnv, s.Node)),
		which, env, shellQuote(line))
}

// Elastic says whether the spec is a pytorch_elastic job with a torchrun range.
func (s WorkerSpec) Elastic() bool { return s.ElasticMaxWorkers > 0 }

// shellQuote quotes v for /bin/sh.
func shellQuote(v string) string { return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'" }

// Job types.
const (
	TypeBinary         = "binary"
	TypeNoGPU          = "nogpu"
	TypePyTorch        = "pytorch"
	TypePyTorch2       = "pytorch2"
	TypeTorchrun       = "torchrun"
	TypeHorovod        = "horovod"
	TypePyTorchElastic = "pytorch_elastic"
)

// IsPythonType reports whether workers of this type run ProcessesPerWorker
// Python processes (one per local rank). binary and nogpu run one shell
// command per worker.
func IsPythonType(t string) bool {
	switch t {
	case TypePyTorch, TypePyTorch2, TypeTorchrun, TypeHorovod, TypePyTorchElastic:
		return true
	}
	return false
}

// ValidType reports whether t is a known job type.
func ValidType(t string) bool {
	return t == TypeBinary || t == TypeNoGPU || IsPythonType(t)
}

// Processes returns the number of OS processes the backend starts for this
// worker: ProcessesPerWorker (at least 1) for Python types, 1 otherwise.
func (s WorkerSpec) Processes() int {
	if !IsPythonType(s.Type) {
		return 1
	}
	if s.ProcessesPerWorker < 1 {
		return 1
	}
	return s.ProcessesPerWorker
}

// Validate checks the spec before anything is started.
func (s WorkerSpec) Validate() error {
	if err := s.ID.Validate(); err != nil {
		return err
	}
	if s.Workers < 1 {
		return fmt.Errorf("workers: must be >= 1, got %d", s.Workers)
	}
	if s.ID.Worker >= s.Workers {
		return fmt.Errorf("worker: index %d out of range for %d workers", s.ID.Worker, s.Workers)
	}
	if !ValidType(s.Type) {
		return fmt.Errorf("type: unknown job type %q", s.Type)
	}
	if strings.TrimSpace(s.Script) == "" {
		return errors.New("script: must not be empty")
	}
	if s.ProcessesPerWorker < 0 {
		return fmt.Errorf("processes_per_worker: must be >= 1, got %d", s.ProcessesPerWorker)
	}
	for _, g := range s.GPUs {
		if g < 0 {
			return fmt.Errorf("gpus: negative GPU index %d", g)
		}
	}
	for k := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("env: invalid variable name %q", k)
		}
	}
	for k := range s.Flags {
		if k == "" {
			return errors.New("flags: empty flag name")
		}
	}
	return nil
}

// ProtectedEnv reports whether the variable is set by trainq and cannot be
// overridden by WorkerSpec.Env: the rank and rendezvous variables,
// CUDA_VISIBLE_DEVICES (the GPUs granted) and everything starting with TRAINQ_.
func ProtectedEnv(name string) bool {
	switch name {
	case "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK",
		"MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES":
		return true
	}
	return strings.HasPrefix(name, "TRAINQ_")
}

// Environment returns the variables (KEY=VALUE, sorted by key) that process
// localRank of this worker gets on top of the inherited environment: the
// spec's Env first, then trainq's own variables, which win over Env (see
// ProtectedEnv). User values for any other name (PATH, NCCL_*, ...) win over
// the inherited environment.
//
// Python types: RANK = worker*processes+localRank, WORLD_SIZE = workers*processes,
// LOCAL_WORLD_SIZE = processes. binary/nogpu: RANK = NODE_RANK = worker,
// WORLD_SIZE = workers, LOCAL_RANK = 0, LOCAL_WORLD_SIZE = 1.
// TRAINQ_CHECKPOINT_DIR is s.CheckpointDir as given (backends fill it first).
func (s WorkerSpec) Environment(localRank int) []string {
	procs := s.Processes()
	m := make(map[string]string, len(s.Env)+16)
	for k, v := range s.Env {
		if !ProtectedEnv(k) {
			m[k] = v
		}
	}
	gpus := make([]string, len(s.GPUs))
	for i, g := range s.GPUs {
		gpus[i] = strconv.Itoa(g)
	}
	m["RANK"] = strconv.Itoa(s.ID.Worker*procs + localRank)
	m["WORLD_SIZE"] = strconv.Itoa(s.Workers * procs)
	m["LOCAL_RANK"] = strconv.Itoa(localRank)
	m["LOCAL_WORLD_SIZE"] = strconv.Itoa(procs)
	m["NODE_RANK"] = strconv.Itoa(s.ID.Worker)
	m["MASTER_ADDR"] = s.MasterAddr
	m["MASTER_PORT"] = strconv.Itoa(s.MasterPort)
	m["CUDA_VISIBLE_DEVICES"] = strings.Join(gpus, ",")
	m["TRAINQ_JOB_NAME"] = s.ID.Job
	m["TRAINQ_ATTEMPT"] = strconv.Itoa(s.ID.Attempt)
	m["TRAINQ_WORKER"] = strconv.Itoa(s.ID.Worker)
	m["TRAINQ_WORKERS"] = strconv.Itoa(s.Workers)
	m["TRAINQ_NODE"] = s.Node
	m["TRAINQ_JOB_TYPE"] = s.Type
	m["TRAINQ_PROCESSES_PER_WORKER"] = strconv.Itoa(max(s.ProcessesPerWorker, 1))
	m["TRAINQ_CHECKPOINT_DIR"] = s.CheckpointDir
	if s.Elastic() {
		m["TRAINQ_ELASTIC_MIN_WORKERS"] = strconv.Itoa(s.ElasticMinWorkers)
		m["TRAINQ_ELASTIC_MAX_WORKERS"] = strconv.Itoa(s.ElasticMaxWorkers)
		m["TRAINQ_ELASTIC_MAX_RESTARTS"] = strconv.Itoa(s.ElasticMaxRestarts)
		m["PET_NNODES"] = fmt.Sprintf("%d:%d", s.ElasticMinWorkers, s.ElasticMaxWorkers)
		m["PET_MAX_RESTARTS"] = strconv.Itoa(s.ElasticMaxRestarts)
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// FlagArgs returns the flags as "--key=value" arguments, keys sorted.
func (s WorkerSpec) FlagArgs() []string {
	keys := make([]string, 0, len(s.Flags))
	for k := range s.Flags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = "--" + k + "=" + s.Flags[k]
	}
	return out
}

var jobNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]*$`)

// MaxJobNameLen bounds job names (they become directory names).
const MaxJobNameLen = 200

// ValidJobName checks that a job name is safe to use as a single path
// component: [a-zA-Z0-9][a-zA-Z0-9._-]*, at most MaxJobNameLen characters.
func ValidJobName(name string) error {
	if name == "" {
		return errors.New("job name: must not be empty")
	}
	if len(name) > MaxJobNameLen {
		return fmt.Errorf("job name: longer than %d characters", MaxJobNameLen)
	}
	if !jobNameRE.MatchString(name) {
		return fmt.Errorf("job name %q: must match [a-zA-Z0-9][a-zA-Z0-9._-]*", name)
	}
	return nil
}

// ErrNotFound is returned (wrapped) by Wait and Logs for a worker that was
// never started.
var ErrNotFound = errors.New("worker not found")

// ErrNodeLost is returned (wrapped) by Wait when the worker's node no
// longer reports on it (a pod stuck in phase Unknown on a node that still
// says Ready): the attempt ends as a node loss, as when the node's agent
// stops answering.
var ErrNodeLost = errors.New("the node lost track of the worker")

// GPUsBusy is returned (wrapped) by Start when a GPU of the spec is still
// used by a live worker of another job or attempt: the capacity granted is
// not really free, so nothing is started. It is the node's last word on
// "one holder per GPU", whatever the allocator believes.
type GPUsBusy struct {
	Node string
	// GPUs are the GPUs of the spec in use, and Holder a live worker that
	// uses them.
	GPUs   []int
	Holder WorkerID
}

func (e *GPUsBusy) Error() string {
	return fmt.Sprintf("GPUs %v on %s are still used by a live worker of another job or attempt", e.GPUs, e.Node)
}

type Phase string

const (
	PhaseRunning  Phase = "running"
	PhaseExited   Phase = "exited"
	PhaseNotFound Phase = "not-found"
)

type WorkerStatus struct {
	ID        WorkerID  `json:"id"`
	Phase     Phase     `json:"phase"`
	PID       int       `json:"pid,omitempty"`
	ExitCode  int       `json:"exit_code"`          // valid when exited; 128+signal if killed by a signal
	Signaled  bool      `json:"signaled,omitempty"` // ended by our Stop (SIGTERM/SIGKILL), or the whole worker was killed by a signal without recording an exit
	StartedAt time.Time `json:"started_at,omitempty"`
	EndedAt   time.Time `json:"ended_at,omitempty"`
	LogPath   string    `json:"log_path,omitempty"`
	// StopRequested is true if Stop was called for this worker while it was
	// running. Unlike Signaled it is never set by an external kill, so it tells
	// "we stopped it" apart from "it was killed" (e.g. by the OOM killer).
	StopRequested bool `json:"stop_requested,omitempty"`
	// Reason is why the worker ended, as the backend reports it when it
	// says more than the exit code (OOMKilled, ContainerCannotRun, ...).
	Reason string `json:"reason,omitempty"`
	// URL is where a Jupyter server serves (WorkerSpec.Notebook), as the
	// backend makes it reachable.
	URL string `json:"url,omitempty"`
	// ReleaseReported is set by the node activity that watched or stopped
	// the worker, not by the backend: it has already told the allocator
	// that the worker's capacity is free (activities' ReleaseTo).
	ReleaseReported bool `json:"release_reported,omitempty"`
}

// Backend starts, watches and stops workers on the cluster.
type Backend interface {
	// Rendezvous picks MASTER_ADDR and a free MASTER_PORT for an attempt. Idempotent per job+attempt
	// (same answer when asked again).
	Rendezvous(ctx context.Context, job string, attempt int) (addr string, port int, err error)
	// Start starts the worker. Idempotent per WorkerID: if it was already started (running or exited),
	// it returns the current status and starts nothing.
	Start(ctx context.Context, spec WorkerSpec) (WorkerStatus, error)
	// Wait blocks until the worker exits (returns its status) or ctx is done (returns ctx.Err()).
	// It calls heartbeat periodically (every ~poll interval). Works for workers started by a previous
	// process of trainq-worker (re-attach), so state must live on disk, not in memory.
	Wait(ctx context.Context, id WorkerID, heartbeat func(WorkerStatus)) (WorkerStatus, error)
	// Status returns the current status without blocking.
	Status(ctx context.Context, id WorkerID) (WorkerStatus, error)
	// Stop stops the worker gracefully: SIGTERM to the whole process group, wait up to grace,
	// then SIGKILL. Idempotent: stopping an exited or never-started worker returns its status at once.
	// Returns only when no process of the worker is left.
	Stop(ctx context.Context, id WorkerID, grace time.Duration) (WorkerStatus, error)
	// Logs copies the worker's log (tail lines, 0 = all) to w.
	Logs(ctx context.Context, id WorkerID, tail int, w io.Writer) error
	// ReadLog reads a chunk of the worker's log where the backend keeps it,
	// for the node agent's log-read activity (see LogReader).
	LogReader
}

// Lister is implemented by backends that can enumerate the workers they know
// of for a job (all attempts), e.g. to reclaim leaked workers.
type Lister interface {
	List(ctx context.Context, job string) ([]WorkerStatus, error)
}

// PlacedWorker is a worker together with where it was started: the node and
// the GPU indices on that node it was given (WorkerSpec.Node and .GPUs). Its
// JSON is the WorkerStatus's fields plus "node" and "gpus".
type PlacedWorker struct {
	WorkerStatus
	Node string `json:"node"`
	GPUs []int  `json:"gpus"`
}

// Inventory is implemented by backends that can tell which workers still
// have processes on a node, whatever started them and whatever trainq
// believes about them: after a node was lost and its agent comes back, this
// is what really holds the node's GPUs.
type Inventory interface {
	// LiveWorkers returns every worker placed on node (by its WorkerSpec.Node)
	// with at least one process still alive, ordered by job, attempt and
	// worker. A worker whose processes are all gone is not listed, even if
	// nobody has noticed its exit yet.
	LiveWorkers(ctx context.Context, node string) ([]PlacedWorker, error)
}

// Noticer is implemented by backends that can tell a running worker it is
// about to be stopped: Notice puts notice (a JSON document) where the
// worker's $TRAINQ_NOTICE_FILE names, atomically, so that a reader never
// sees half of it.
type Noticer interface {
	Notice(ctx context.Context, id WorkerID, notice []byte) error
}

// NoticeSignaller is implemented by backends that can also send a running
// worker's processes a signal with its notice (an allocation's
// notice_signal, such as "SIGUSR1").
type NoticeSignaller interface {
	NoticeSignal(ctx context.Context, id WorkerID, signal string) error
}

// NoticeFileEnv names the environment variable that holds the path of a
// worker's notice file (it exists only once a notice was given).
const NoticeFileEnv = "TRAINQ_NOTICE_FILE"

// OutputClock is implemented by backends that know when a worker last wrote
// to its log, for stuck-job detection (health_params.log_period).
type OutputClock interface {
	// LastOutput returns when the worker's log last changed, or the zero
	// time if it has no log yet. The answer comes from durable state (such
	// as the log file's modification time), so it survives a restart of the
	// process that asks. A worker that was never started is ErrNotFound.
	LastOutput(ctx context.Context, id WorkerID) (time.Time, error)
}

// ErrNoInventory is returned by Fence for a backend that is not an Inventory.
var ErrNoInventory = errors.New("the cluster backend cannot list the workers of a node")

// Fence stops, on node, every live worker (see Inventory) that is not in
// keep, all at once and each gracefully (Backend.Stop with grace: SIGTERM,
// then SIGKILL after grace), and then lists the node again. It returns the
// workers it stopped, with their status after stopping, and the workers
// still live on the node afterwards: normally exactly the live ones of keep.
// Fence is idempotent; once the node is fenced, another call stops nothing.
// A nil error confirms that no worker outside keep is live on the node: if
// stopping a worker fails, or a worker outside keep is live afterwards
// (started meanwhile), the error says so (joined over all workers) and is
// returned together with what was done; calling Fence again continues.
func Fence(ctx context.Context, b Backend, node string, keep []WorkerID, grace time.Duration) (stopped, live []PlacedWorker, err error) {
	inv, ok := b.(Inventory)
	if !ok {
		return nil, nil, fmt.Errorf("fence node %s: %w", node, ErrNoInventory)
	}
	before, err := inv.LiveWorkers(ctx, node)
	if err != nil {
		return nil, nil, fmt.Errorf("fence node %s: list live workers: %w", node, err)
	}
	kept := make(map[WorkerID]bool, len(keep))
	for _, id := range keep {
		kept[id] = true
	}
	var victims []PlacedWorker
	for _, w := range before {
		if !kept[w.ID] {
			victims = append(victims, w)
		}
	}
	errs := make([]error, len(victims))
	done := make(chan int, len(victims))
	for i := range victims {
		go func() {
			st, err := b.Stop(ctx, victims[i].ID, grace)
			if err == nil {
				victims[i].WorkerStatus = st
			} else {
				errs[i] = fmt.Errorf("stop %s: %w", victims[i].ID, err)
			}
			done <- i
		}()
	}
	for range victims {
		<-done
	}
	for i, w := range victims {
		if errs[i] == nil {
			stopped = append(stopped, w)
		}
	}
	live, lerr := inv.LiveWorkers(ctx, node)
	if lerr != nil {
		errs = append(errs, fmt.Errorf("fence node %s: list live workers: %w", node, lerr))
	}
	for _, w := range live {
		if !kept[w.ID] {
			errs = append(errs, fmt.Errorf("fence node %s: %s is still live", node, w.ID))
		}
	}
	return stopped, live, errors.Join(errs...)
}
