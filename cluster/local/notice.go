package local

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"

	"github.com/trainq/trainq/cluster"
)

// Notice writes a stop notice where the worker's $TRAINQ_NOTICE_FILE names
// (see cluster.Noticer). A worker that was never started is ErrNotFound.
func (b *Backend) Notice(ctx context.Context, id cluster.WorkerID, notice []byte) error {
	dir, err := b.WorkerDir(id)
	if err != nil {
		return err
	}
	if !b.launched(dir) {
		return fmt.Errorf("%w: %s", cluster.ErrNotFound, id)
	}
	return writeFileAtomic(filepath.Join(dir, fileNotice), notice)
}

// noticeSignals are the signals NoticeSignal sends, by name.
var noticeSignals = map[string]syscall.Signal{
	"SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2, "SIGHUP": syscall.SIGHUP, "SIGINT": syscall.SIGINT,
}

// NoticeSignal sends the worker's process group the named signal (see
// cluster.NoticeSignaller). The supervisor catches it and goes on waiting;
// a worker process that does not handle it gets the signal's default
// action, as with Slurm's --signal.
func (b *Backend) NoticeSignal(ctx context.Context, id cluster.WorkerID, signal string) error {
	sig, ok := noticeSignals[signal]
	if !ok {
		return fmt.Errorf("cannot send %q with a notice: not one of SIGUSR1, SIGUSR2, SIGHUP, SIGINT", signal)
	}
	dir, err := b.WorkerDir(id)
	if err != nil {
		return err
	}
	info, err := readProcInfo(dir)
	if err != nil {
		return err
	}
	if info == nil || !groupAlive(info) {
		return fmt.Errorf("%w: %s has no running processes", cluster.ErrNotFound, id)
	}
	return syscall.Kill(-info.PID, sig)
}
