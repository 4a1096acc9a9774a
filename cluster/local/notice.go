package local

import (
	"context"
	"fmt"
	"path/filepath"

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
