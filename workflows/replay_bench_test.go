package workflows

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// BenchmarkReplayHistories replays the histories $TRAINQ_REPLAY_HISTORIES
// names (a glob, e.g. the allocator runs TestBurstOfGrantsAfterOneRelease
// writes with TRAINQ_BURST_HISTORIES=dir): what a worker pays to rebuild a
// run it does not have cached, all of it inside one workflow task.
//
//	TRAINQ_BURST_HISTORIES=/tmp/burst go test ./e2e/ -run TestBurstOfGrantsAfterOneRelease -count=1
//	TRAINQ_REPLAY_HISTORIES='/tmp/burst/*.json' go test ./workflows/ -run '^$' -bench ReplayHistories -benchtime 3x
func BenchmarkReplayHistories(b *testing.B) {
	pattern := os.Getenv("TRAINQ_REPLAY_HISTORIES")
	if pattern == "" {
		b.Skip("set TRAINQ_REPLAY_HISTORIES to a glob of JSON histories")
	}
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		b.Fatalf("no histories match %q (%v)", pattern, err)
	}
	for _, file := range files {
		load := func(b *testing.B) *historypb.History {
			f, err := os.Open(file)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
			if err != nil {
				b.Fatal(err)
			}
			return hist
		}
		b.Run(fmt.Sprintf("%s/%d-events", filepath.Base(file), len(load(b).Events)), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				hist := load(b) // the replay may keep or change what it is given
				r := testenv.NewReplayer()
				r.RegisterWorkflowWithOptions(AllocatorWorkflow, workflow.RegisterOptions{Name: protocol.AllocatorWorkflowName})
				b.StartTimer()
				if err := r.ReplayWorkflowHistory(nil, hist); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
