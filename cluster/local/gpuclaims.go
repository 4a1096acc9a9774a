package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/trainq/trainq/cluster"
)

// A node's GPU claims say which worker was last started on each of its GPUs:
// <DataDir>/nodes/<node>/gpus/<index>.json holds that worker's ID. A start
// looks at the claims of its GPUs, with the node's claims locked until its
// worker is launched, and refuses (cluster.GPUsBusy) if a claimed worker of
// another job or attempt is still alive: whatever the allocator decided, the
// node never runs two workers on one GPU. A claim of a worker that has
// ended is stale and simply taken over, so claims need no cleaning up.
//
// Workers started by a build without claims are not seen: the guard covers
// what starts after the upgrade.

// claimGPUs checks and claims spec's GPUs. The returned unlock must be called
// once the worker is launched (or the start failed), so that two starts on
// one node cannot both find a GPU free.
func (b *Backend) claimGPUs(spec cluster.WorkerSpec) (unlock func(), err error) {
	if len(spec.GPUs) == 0 || spec.Node == "" {
		return func() {}, nil
	}
	if spec.Node == "." || spec.Node == ".." || strings.ContainsAny(spec.Node, `/\`+"\x00") {
		return nil, fmt.Errorf("node: %q is not a node name", spec.Node)
	}
	dir := filepath.Join(b.opts.DataDir, "nodes", spec.Node, "gpus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	unlock, err = lockDir(dir)
	if err != nil {
		return nil, err
	}
	busy := &cluster.GPUsBusy{Node: spec.Node}
	uses := map[cluster.WorkerID]bool{} // one look per holder: usesGPUs may read every process's environment
	for _, g := range spec.GPUs {
		var holder cluster.WorkerID
		found, err := readJSON(claimPath(dir, g), &holder)
		if err != nil || !found || holder == spec.ID {
			continue // an unreadable claim is a torn write of a start that never launched
		}
		used, seen := uses[holder]
		if !seen {
			used = b.usesGPUs(holder)
			uses[holder] = used
		}
		if used {
			busy.GPUs, busy.Holder = append(busy.GPUs, g), holder
		}
	}
	if len(busy.GPUs) > 0 {
		unlock()
		return nil, busy
	}
	for _, g := range spec.GPUs {
		if err := writeJSONAtomic(claimPath(dir, g), spec.ID); err != nil {
			unlock()
			return nil, fmt.Errorf("claim GPU %d on %s: %w", g, spec.Node, err)
		}
	}
	return unlock, nil
}

func claimPath(dir string, gpu int) string {
	return filepath.Join(dir, strconv.Itoa(gpu)+".json")
}

// usesGPUs says whether a worker may still use its GPUs: its process group
// is alive and its supervisor has not written the exit record, which it
// writes only once the worker's processes, strays included, are gone (the
// moment a watch reports the worker exited and its GPUs released); or a
// process that left the group still carries the worker's mark (see
// workerMark): its supervisor was killed before it could end it, or could
// not end it. Only then are the node's processes looked through.
func (b *Backend) usesGPUs(id cluster.WorkerID) bool {
	dir, err := b.WorkerDir(id)
	if err != nil {
		return false
	}
	var rec exitRecord
	if ended, err := readJSON(filepath.Join(dir, fileExit), &rec); err == nil && ended {
		// The supervisor ended the worker's processes before it wrote the
		// record; look further only for those it could not end.
		return len(rec.Leftovers) > 0 && markedAlive(dir)
	}
	info, err := readProcInfo(dir)
	if err == nil && groupAlive(info) {
		return true
	}
	return markedAlive(dir) // the supervisor was killed
}
