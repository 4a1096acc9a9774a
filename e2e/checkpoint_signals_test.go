package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// TestCheckpointsDoNotUseUpTheJobsSignals, with real processes: every
// `trainq checkpoint` also signals the job (SignalCheckpointed), and a job
// continues as new only between attempts, so a long attempt that reports
// often spends the run's signals (history.maximumSignalsPerExecution,
// 10,000 by default: 17 hours at the REST API's 10 checkpoints a minute).
// Past them every signal to the job is refused, the allocator's preemptions
// and drains included, and a refused preempt signal makes the allocator
// reclaim the job as gone: its workers are stopped without their notice
// while it runs, and the attempt is charged as a failure. Here the server
// allows 12 signals a run; after 14 checkpoints a drain must still move the
// job with its notice and rerun it without spending max_retry.
func TestCheckpointsDoNotUseUpTheJobsSignals(t *testing.T) {
	const signalsPerRun = 12
	temporalBin := os.Getenv("TRAINQ_TEMPORAL_BIN_RESOLVED")
	require.NotEmpty(t, temporalBin)
	var log bytes.Buffer
	srv, err := testsuite.StartDevServer(context.Background(), testsuite.DevServerOptions{
		ExistingPath: temporalBin, LogLevel: "error", Stdout: &log, Stderr: &log,
		ExtraArgs: append(protocol.DevServerArgs(), "--dynamic-config-value",
			fmt.Sprintf("history.maximumSignalsPerExecution=%d", signalsPerRun)),
	})
	require.NoError(t, err, log.String())
	t.Cleanup(func() { _ = srv.Stop() })
	c, hostPort := srv.Client(), srv.FrontendHostPort()

	w, err := testenv.StartWorker(filepath.Join(env.binDir, "trainq-worker"),
		[]string{"--config", env.configPath}, []string{"TEMPORAL_ADDRESS=" + hostPort})
	require.NoError(t, err)
	t.Cleanup(func() {
		w.Stop(30 * time.Second)
		if t.Failed() {
			t.Logf("trainq-worker log:\n%s", w.LogTail(60))
		}
	})
	cli := func(args ...string) (string, string, int) {
		cmd := exec.Command(filepath.Join(env.binDir, "trainq"), args...)
		cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+hostPort, "TRAINQ_CONFIG="+env.configPath)
		return runCommand(t, cmd)
	}

	dir := t.TempDir()
	script := `if [ "$TRAINQ_ATTEMPT" = 2 ]; then exit 0; fi; ` +
		filepath.Join(env.binDir, "trainq") + ` notice --wait -o json > ` + dir + `/notice.json; exit 0`
	spec := protocol.JobSpec{Script: script, InstanceType: "a100.2gpu", Region: "T", AllocationName: "drain",
		PriorityClass: "medium", NWorkers: 1, Type: "binary"}
	var job string
	require.NoError(t, testenv.Retry(t, long, "submit", func(ctx context.Context) error {
		sub, err := tqclient.New(c, env.cfg).Submit(ctx, spec, tqclient.SubmitOptions{Name: tqclient.NewJobName(spec.Kind)})
		job = sub.JobName
		return err
	}))
	st := testenv.WaitState(t, c, job, protocol.StateRunning, long)
	node := st.Attempts[0].Placement[0].Node

	for i := range signalsPerRun + 2 {
		_, errOut, code := cli("checkpoint", job)
		require.Equal(t, 0, code, "checkpoint %d: %s", i+1, errOut)
	}
	_, errOut, code := cli("allocator", "drain", node, "--allocation", "drain", "--region", "T", "--reason", "disk swap")
	require.Equal(t, 0, code, errOut)
	t.Cleanup(func() { cli("allocator", "undrain", node, "--allocation", "drain", "--region", "T") })

	ctx, cancel := context.WithTimeout(context.Background(), 2*long)
	defer cancel()
	var end protocol.JobStatus
	_ = c.GetWorkflow(ctx, job, "").Get(ctx, &end)
	st, err = tqclient.New(c, nil).Status(ctx, job)
	require.NoError(t, err)
	b, _ := json.MarshalIndent(st.Attempts, "", "  ")
	assert.Equal(t, protocol.StateCompleted, st.State, "%s\n%s", st.Message, b)
	assert.Equal(t, 0, st.Restarts, "a drain does not spend max_retry")
	_, err = os.Stat(filepath.Join(dir, "notice.json"))
	assert.NoError(t, err, "the worker got its notice (reason node_drain) before it was stopped")
}
