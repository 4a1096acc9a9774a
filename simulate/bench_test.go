package simulate

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trainq/trainq/scheduler"
)

func loadTrace(tb testing.TB) *Workload {
	dir := os.Getenv("TRAINQ_TRACE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "shared", "traces", "alibaba-gpu-v2023")
	}
	pods, err := os.Open(filepath.Join(dir, "openb_pod_list_default.csv"))
	if err != nil {
		tb.Skip("no openb trace:", err)
	}
	defer pods.Close()
	nodes, err := os.Open(filepath.Join(dir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		tb.Skip("no openb trace:", err)
	}
	defer nodes.Close()
	w, err := LoadOpenB(OpenB{Pods: pods, PodsName: "default", Nodes: nodes, NodeName: "nodes"})
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// BenchmarkTraceBurst replays the whole default pod list arriving at once on all 1,213 nodes.
func BenchmarkTraceBurst(b *testing.B) {
	w := loadTrace(b)
	pol := Policy{Name: "best-effort", Scheduler: scheduler.Policy{ReserveAfter: 30 * time.Minute}}
	for i := 0; i < b.N; i++ {
		if _, err := Run(w, pol, Options{StopDelay: 30 * time.Second, MaxRetry: -1, Burst: true}); err != nil {
			b.Fatal(err)
		}
	}
}
