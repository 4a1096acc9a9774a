package local

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/cluster/local/logfile"
)

// Files in a worker directory <DataDir>/jobs/<job>/attempt-<n>/worker-<w>/.
const (
	fileLock     = ".lock"          // flock: serialises Start across goroutines and processes
	fileSpec     = "spec.json"      // the resolved cluster.WorkerSpec
	fileLaunch   = "launch.json"    // what the supervisor runs (launchPlan)
	filePID      = "pid"            // supervisor pid = process group id, decimal; its presence means "launched"
	fileStarted  = "started.json"   // procInfo: pid identity (boot id, start time) to detect pid reuse
	filePIDs     = "pids.json"      // the user processes started by the supervisor
	fileExit     = "exit.json"      // exitRecord, written atomically when the worker ends
	fileNotice   = "notice.json"    // protocol.WorkerNotice, written atomically when the worker is to be stopped ($TRAINQ_NOTICE_FILE)
	fileStop     = "stop.json"      // stopRecord, written by Stop before it signals
	fileNotebook = "notebook.json"  // notebookRecord: a Jupyter server's token for trainq's status reads
	fileLog      = logfile.FileName // stdout+stderr of the supervisor and all processes, appended

	fileRendezvous = "rendezvous.json" // in the attempt directory
)

// launchPlan is everything the supervisor needs; Start writes it so that
// Supervise does not depend on the backend's Options.
type launchPlan struct {
	ID           cluster.WorkerID `json:"id"`
	Log          string           `json:"log"`
	Procs        []procPlan       `json:"procs"`
	SiblingGrace time.Duration    `json:"sibling_grace"`
}

type procPlan struct {
	LocalRank int      `json:"local_rank"`
	Argv      []string `json:"argv"`
	Env       []string `json:"env"` // added on top of the supervisor's environment
}

// procInfo identifies the supervisor process.
type procInfo struct {
	PID        int       `json:"pid"`
	StartedAt  time.Time `json:"started_at"`
	BootID     string    `json:"boot_id,omitempty"`
	StartTicks uint64    `json:"start_ticks,omitempty"` // /proc/<pid>/stat field 22
}

type procExit struct {
	LocalRank int    `json:"local_rank"`
	PID       int    `json:"pid,omitempty"`
	ExitCode  int    `json:"exit_code"`
	Error     string `json:"error,omitempty"`
}

type exitRecord struct {
	ExitCode  int        `json:"exit_code"`
	EndedAt   time.Time  `json:"ended_at"`
	Processes []procExit `json:"processes,omitempty"`
	// Killed: no exit was recorded by the supervisor; the whole group died
	// (SIGKILL), and the backend wrote this record when it noticed.
	Killed       bool   `json:"killed,omitempty"`
	TermReceived bool   `json:"term_received,omitempty"`
	Error        string `json:"error,omitempty"`
	// Leftovers are processes of the worker the supervisor could not end
	// (see killStrays); while one lives, the worker's GPUs stay claimed.
	Leftovers []int `json:"leftovers,omitempty"`
}

type stopRecord struct {
	RequestedAt time.Time     `json:"requested_at"`
	Grace       time.Duration `json:"grace"`
}

// writeFileAtomic writes data to a temporary file in the same directory,
// syncs it and renames it over path, so readers see all or nothing.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp) // err, returned, is what went wrong
	}
	return err
}

func writeJSONAtomic(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(data, '\n'))
}

// readJSON returns (false, nil) if the file does not exist.
func readJSON(path string, v any) (bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, err
	}
	return true, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// readPID returns 0 if the pid file does not exist.
func readPID(dir string) (int, error) {
	data, err := os.ReadFile(filepath.Join(dir, filePID))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return 0, errors.New("corrupt pid file " + filepath.Join(dir, filePID))
	}
	return pid, nil
}

// readProcInfo returns nil if the worker was never launched.
func readProcInfo(dir string) (*procInfo, error) {
	pid, err := readPID(dir)
	if err != nil || pid == 0 {
		return nil, err
	}
	var info procInfo
	ok, err := readJSON(filepath.Join(dir, fileStarted), &info)
	if err != nil || !ok || info.PID != pid {
		// No usable identity: check liveness by pid/pgid alone.
		info = procInfo{PID: pid}
	}
	return &info, nil
}

// recordLaunch writes started.json then pid (pid last: it marks "launched").
func recordLaunch(dir string, pid int, startedAt time.Time) error {
	info := procInfo{PID: pid, StartedAt: startedAt.UTC(), BootID: bootID()}
	if st, ok := readStat(pid); ok {
		info.StartTicks = st.startTicks
	}
	if err := writeJSONAtomic(filepath.Join(dir, fileStarted), info); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, filePID), []byte(strconv.Itoa(pid)+"\n"))
}

// lockDir takes an exclusive flock on dir/.lock. Locks are per open file, so
// they exclude other goroutines of this process as well as other processes,
// and are released if the process dies.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, fileLock), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close() // releases the lock too, if Flock could not
	}, nil
}

// tailLines copies the last n lines of r (size bytes) to w; n <= 0 copies all.
func tailLines(r io.ReaderAt, size int64, n int, w io.Writer) error {
	start := int64(0)
	if n > 0 {
		var err error
		if start, err = TailStart(r, size, n); err != nil {
			return err
		}
	}
	_, err := io.Copy(w, io.NewSectionReader(r, start, size-start))
	return err
}

// TailStart returns the offset where the last n lines of r[0:size] begin
// (see cluster.TailStart).
func TailStart(r io.ReaderAt, size int64, n int) (int64, error) {
	return cluster.TailStart(r, size, n)
}
