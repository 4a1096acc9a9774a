// Package logfile knows where the local backend keeps each worker's files
// and reads their logs in chunks (a cluster.LogReader). It has no process
// code, so the CLI and the REST API read logs through it without linking the
// backend that starts and stops workers.
//
// A worker's files live under <DataDir>/jobs/<job>/attempt-<n>/worker-<w>/;
// its stdout and stderr are appended to worker.log there.
package logfile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/trainq/trainq/cluster"
)

// FileName is the name of a worker's log in its directory.
const FileName = "worker.log"

// AttemptDir is the directory of one attempt of job under dataDir.
func AttemptDir(dataDir, job string, attempt int) (string, error) {
	if err := cluster.ValidJobName(job); err != nil {
		return "", err
	}
	if attempt < 0 {
		return "", fmt.Errorf("attempt: must be >= 0, got %d", attempt)
	}
	return filepath.Join(dataDir, "jobs", job, "attempt-"+strconv.Itoa(attempt)), nil
}

// WorkerDir is the directory holding a worker's state and log.
func WorkerDir(dataDir string, id cluster.WorkerID) (string, error) {
	if err := id.Validate(); err != nil {
		return "", err
	}
	ad, err := AttemptDir(dataDir, id.Job, id.Attempt)
	if err != nil {
		return "", err
	}
	return filepath.Join(ad, "worker-"+strconv.Itoa(id.Worker)), nil
}

// Path is the worker's log file (it may not exist yet).
func Path(dataDir string, id cluster.WorkerID) (string, error) {
	dir, err := WorkerDir(dataDir, id)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, FileName), nil
}

// Source reads the logs of the workers the local backend ran with this data
// dir, as a cluster.LogReader. It needs no running trainq-worker, only the
// directory (shared with the node, or the node's own disk).
type Source struct {
	DataDir string
}

var _ cluster.LogSource = Source{}

// Reachable says whether this machine has the data dir: logs live where
// trainq-worker runs, under its data dir.
func (s Source) Reachable() error {
	if _, err := os.Stat(s.DataDir); err != nil {
		return fmt.Errorf("no logs on this machine: the data dir %s does not exist; logs live where trainq-worker runs, under its data_dir (run trainq from the same directory, or set data_dir to an absolute path)", s.DataDir)
	}
	return nil
}

// ReadLog reads a chunk of the worker's log. A worker without a directory
// is cluster.ErrNotFound (wrapped); one that has not written yet gives an
// empty chunk.
func (s Source) ReadLog(ctx context.Context, req cluster.LogRequest) (cluster.LogChunk, error) {
	if err := req.Validate(); err != nil {
		return cluster.LogChunk{}, err
	}
	path, err := Path(s.DataDir, req.ID)
	if err != nil {
		return cluster.LogChunk{}, err
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(filepath.Dir(path)); errors.Is(serr, os.ErrNotExist) {
			return cluster.LogChunk{}, fmt.Errorf("%w: %s", cluster.ErrNotFound, req.ID)
		}
		return cluster.LogChunk{Reset: req.Offset > 0}, nil
	}
	if err != nil {
		return cluster.LogChunk{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return cluster.LogChunk{}, err
	}
	return cluster.ReadChunk(f, fi.Size(), req)
}
