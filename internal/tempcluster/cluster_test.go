package tempcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/protocol"
)

// binariesOrSkip finds the cluster's binaries; without them the test is
// skipped, unless CI or TRAINQ_REQUIRE_CLUSTER is set (then it fails).
func binariesOrSkip(t *testing.T) Binaries {
	t.Helper()
	if os.Getenv("TRAINQ_SKIP_E2E") != "" {
		t.Skip("TRAINQ_SKIP_E2E is set")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	bin, err := FindBinaries(root)
	if err != nil {
		if os.Getenv("CI") != "" || os.Getenv("TRAINQ_REQUIRE_CLUSTER") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	postgresOrSkip(t)
	return bin
}

// postgresOrSkip skips the test without PostgreSQL's server binaries, unless
// CI or TRAINQ_REQUIRE_CLUSTER is set (then it fails).
func postgresOrSkip(t *testing.T) {
	t.Helper()
	if _, err := postgresBinDir(); err != nil {
		if os.Getenv("CI") != "" || os.Getenv("TRAINQ_REQUIRE_CLUSTER") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// upsertState is a workflow that sets trainq's state search attribute.
func upsertState(ctx workflow.Context, state string) (string, error) {
	return state, workflow.UpsertTypedSearchAttributes(ctx, protocol.KeyState.ValueSet(state))
}

// TestClusterServesAndSurvivesItsFaults starts the cluster, runs a workflow
// that upserts a trainq search attribute and finds it through SQL
// visibility, then does the same after kill -9 and restart of each
// service and after a PostgreSQL crash, printing how long each took to
// serve again and the visibility lag.
func TestClusterServesAndSurvivesItsFaults(t *testing.T) {
	bin := binariesOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := Start(ctx, bin, Options{Dir: t.TempDir()})
	require.NoError(t, err)
	defer c.Stop()
	t.Logf("cluster serving after %s: frontend %s, %d shards", time.Since(start).Round(time.Millisecond), c.HostPort(), c.Shards())

	cl, err := c.Client(ctx)
	require.NoError(t, err)
	defer cl.Close()
	w := worker.New(cl, "tempcluster-test", worker.Options{})
	w.RegisterWorkflow(upsertState)
	require.NoError(t, w.Start())
	defer w.Stop()

	round := func(what string) {
		t.Helper()
		id := fmt.Sprintf("tempcluster-%s-%d", what, time.Now().UnixNano())
		var out string
		require.NoError(t, retry(ctx, func(ctx context.Context) error {
			_, err := cl.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "tempcluster-test"}, upsertState, what)
			var started *serviceerror.WorkflowExecutionAlreadyStarted
			if err != nil && !asErr(err, &started) {
				return err
			}
			return cl.GetWorkflow(ctx, id, "").Get(ctx, &out)
		}), what)
		done := time.Now()
		query := fmt.Sprintf("WorkflowId = '%s' AND %s = '%s' AND ExecutionStatus = 'Completed'", id, protocol.SAState, what)
		require.NoError(t, retry(ctx, func(ctx context.Context) error {
			resp, err := cl.ListWorkflow(ctx, listRequest(query))
			if err != nil {
				return err
			}
			if len(resp.Executions) != 1 {
				return fmt.Errorf("not listed yet")
			}
			return nil
		}), "list %s", what)
		t.Logf("%s: a workflow ran; listed by its search attribute %s after it completed (visibility lag)", what, time.Since(done).Round(time.Millisecond))
	}
	round("fresh")
	for _, s := range []string{History, Matching, Frontend, Worker} {
		begin := time.Now()
		require.NoError(t, c.Restart(ctx, s))
		t.Logf("kill -9 %s: answering again %s later", s, time.Since(begin).Round(time.Millisecond))
		round(s)
	}
	begin := time.Now()
	require.NoError(t, c.RestartPostgres(ctx))
	t.Logf("PostgreSQL crash: accepting connections again %s later", time.Since(begin).Round(time.Millisecond))
	round("postgres")
}

func retry(ctx context.Context, f func(context.Context) error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func asErr(err error, target any) bool { return errors.As(err, target) }

func listRequest(query string) *workflowservice.ListWorkflowExecutionsRequest {
	return &workflowservice.ListWorkflowExecutionsRequest{Namespace: client.DefaultNamespace, Query: query}
}
