package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/testsuite"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	kubeb "github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/internal/kubetest"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// EnvLargest runs TestKubeLargestJob, which takes a few minutes on a small
// machine: too long for every `make test`.
const EnvLargest = "TRAINQ_KUBE_LARGEST"

// largestNodes is how many nodes allocation "largest" selects: one per
// worker of the largest job the API accepts.
const largestNodes = protocol.MaxNWorkers

const largestLabel = "largest"

// largestTimeout bounds each wait of TestKubeLargestJob.
const largestTimeout = 6 * time.Minute

// addLargestNodes creates the nodes of allocation "largest" (1 GPU each),
// many at once, through a client allowed more requests per second than the
// harness's; they are deleted when the test ends, so that the next tests'
// trainq-workers do not run an agent for each.
func addLargestNodes(t *testing.T, n int) []string {
	t.Helper()
	cfg := rest.CopyConfig(env.cluster.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	fast := &kubetest.Cluster{Client: cs, Config: cfg}
	selector := "trainq.io/allocation=" + largestLabel
	t.Cleanup(func() {
		err := cs.CoreV1().Nodes().DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Errorf("delete the nodes of allocation largest: %v", err)
		}
	})
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("big-%04d", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	todo := make(chan string)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range todo {
				errs <- fast.AddNode(ctx, kubetest.Node{Name: name, GPUs: 1, CPU: 16, MemoryGi: 128,
					Labels: map[string]string{"trainq.io/allocation": largestLabel, kubeb.FamilyLabel: "a100"}})
			}
		}()
	}
	for _, name := range names {
		todo <- name
	}
	close(todo)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return names
}

// EnvLargestDefaultLimits runs TestKubeLargestJob on the package's dev
// server, with Temporal's default limits, where it fails (see ownDevServer).
const EnvLargestDefaultLimits = "TRAINQ_KUBE_LARGEST_DEFAULT_LIMITS"

// pollersPerNamespace is frontend.namespaceCount for TestKubeLargestJob's
// dev server: Temporal's default, 1,200 concurrent long polls per namespace
// and frontend, is less than trainq-worker's node agents take with 1,024
// nodes (each agent is an SDK worker on its node's task queue, polling for
// workflow and activity tasks: about 4 polls a node). Past the limit the
// server refuses polls ("namespace concurrent poller limit exceeded"),
// including those of the allocators' and jobs' queues, so nothing moves.
const pollersPerNamespace = 10000

// ownDevServer points the test's helpers at a dev server of its own, with
// the package's settings plus pollersPerNamespace, until the test ends.
func ownDevServer(t *testing.T) {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	bin, skip, err := testenv.TemporalCLI(root)
	require.NoError(t, err)
	require.Empty(t, skip)
	args := append(protocol.DevServerArgs(), "--dynamic-config-value", fmt.Sprintf("frontend.namespaceCount=%d", pollersPerNamespace))
	srv, err := testsuite.StartDevServer(context.Background(), testsuite.DevServerOptions{ExistingPath: bin, LogLevel: "error", ExtraArgs: args})
	require.NoError(t, err)
	hostPort, c := env.hostPort, env.client
	env.hostPort, env.client = srv.FrontendHostPort(), srv.Client()
	t.Cleanup(func() {
		env.hostPort, env.client = hostPort, c
		if err := srv.Stop(); err != nil {
			t.Logf("stop the test's dev server: %v", err)
		}
	})
}

// waitPods is podWatch.wait with a timeout of its own (wait's is long).
func (pw *podWatch) waitPods(t *testing.T, timeout time.Duration, what string, cond func(pw *podWatch) bool) {
	t.Helper()
	timer := time.AfterFunc(timeout, func() { pw.mu.Lock(); pw.cond.Broadcast(); pw.mu.Unlock() })
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	pw.mu.Lock()
	defer pw.mu.Unlock()
	for !cond(pw) {
		if time.Now().After(deadline) {
			phases := map[corev1.PodPhase]int{}
			for _, p := range pw.pods {
				phases[p.Status.Phase]++
			}
			t.Fatalf("timed out after %s waiting for %s; pods by phase: %v, %d gone", timeout, what, phases, len(pw.gone))
		}
		pw.cond.Wait()
	}
}

// historyFacts is what a workflow's histories (every run of it, following
// continue-as-new back from the latest) say about its workflow tasks and
// activities.
type historyFacts struct {
	runs, events  int
	failedByCause map[string]int // WorkflowTaskFailed, by cause
	timedOutTasks int            // WorkflowTaskTimedOut
	maxPending    int            // most activities scheduled and not yet closed at once (in one run)
	scheduled     int            // ActivityTaskScheduled, in all
	signalsSent   int            // SignalExternalWorkflowExecutionInitiated
}

func historyOf(t *testing.T, workflowID string) historyFacts {
	t.Helper()
	f := historyFacts{failedByCause: map[string]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runID := ""
	for {
		it := env.client.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		pending, prev := 0, ""
		for it.HasNext() {
			ev, err := it.Next()
			require.NoError(t, err)
			f.events++
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
				prev = ev.GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
				pending++
				f.scheduled++
				f.maxPending = max(f.maxPending, pending)
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED,
				enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT, enumspb.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
				pending--
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:
				f.failedByCause[failCause(ev)]++
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
				f.timedOutTasks++
			case enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
				f.signalsSent++
			}
		}
		f.runs++
		if prev == "" {
			return f
		}
		runID = prev
	}
}

func failCause(ev *historypb.HistoryEvent) string {
	a := ev.GetWorkflowTaskFailedEventAttributes()
	cause := strings.TrimPrefix(a.GetCause().String(), "WORKFLOW_TASK_FAILED_CAUSE_")
	if msg := a.GetFailure().GetMessage(); msg != "" && cause != "UNHANDLED_COMMAND" {
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		cause += ": " + msg
	}
	return cause
}

// failed is the workflow task failures that are not UnhandledCommand (a
// signal arriving while the task completes: the SDK runs the task again,
// which is benign).
func (f historyFacts) failed() map[string]int {
	out := map[string]int{}
	for c, n := range f.failedByCause {
		if c != "UNHANDLED_COMMAND" {
			out[c] = n
		}
	}
	return out
}

func (f historyFacts) String() string {
	causes := make([]string, 0, len(f.failedByCause))
	for c, n := range f.failedByCause {
		causes = append(causes, fmt.Sprintf("%s×%d", c, n))
	}
	sort.Strings(causes)
	return fmt.Sprintf("%d events in %d run(s), %d activities (at most %d pending at once), %d signals sent, failed workflow tasks: [%s], timed out workflow tasks: %d",
		f.events, f.runs, f.scheduled, f.maxPending, f.signalsSent, strings.Join(causes, ", "), f.timedOutTasks)
}

// TestKubeLargestJob runs the largest job the API accepts, n_workers
// protocol.MaxNWorkers with a pod on each of as many 1-GPU nodes, has a
// one-node job of a higher class preempt it, and checks from the server that
// no workflow task of the job or of the allocator failed. It takes a few
// minutes: set TRAINQ_KUBE_LARGEST=1 to run it.
func TestKubeLargestJob(t *testing.T) {
	if os.Getenv(EnvLargest) == "" {
		t.Skipf("set %s=1 to run the largest job (%d workers; a few minutes)", EnvLargest, largestNodes)
	}
	begin := time.Now()
	addLargestNodes(t, largestNodes)
	t.Logf("FIGURE %d nodes created and Ready in %v", largestNodes, time.Since(begin).Round(time.Millisecond))

	if os.Getenv(EnvLargestDefaultLimits) == "" {
		ownDevServer(t)
	}
	pw := watchPods(t)
	begin = time.Now()
	w := startWorker(t)
	t.Cleanup(func() {
		// The whole log of trainq-worker, to read what it did with so many workers.
		path := filepath.Join(os.TempDir(), "trainq-kube-largest-worker.log")
		if err := os.WriteFile(path, []byte(w.LogTail(1<<30)), 0o644); err == nil {
			t.Logf("trainq-worker's log: %s", path)
		}
	})
	eventually(t, largestTimeout, "the allocator of allocation largest to know its nodes", func() bool {
		return len(queueNodes(largestLabel)) == largestNodes
	})
	t.Logf("FIGURE trainq-worker started → allocator knows the %d nodes: %v", largestNodes, time.Since(begin).Round(time.Millisecond))

	// The big job: every node, 1 GPU each, lowest class, no retry.
	spec := jobSpec(largestLabel, "low", largestNodes, nil)
	spec.InstanceType = "a100.1gpu"
	spec.MaxRetry = 0
	require.NoError(t, protocol.CheckLimits(spec), "the API accepts the job")
	submitted := time.Now()
	big := submit(t, spec)
	pods := make([]string, largestNodes)
	for w := range pods {
		pods[w] = podName(big, 1, w)
	}
	pw.waitPods(t, largestTimeout, fmt.Sprintf("the %d pods of %s to run", largestNodes, big), func(pw *podWatch) bool {
		for _, n := range pods {
			if p := pw.pods[n]; p == nil || p.Status.Phase != corev1.PodRunning {
				return false
			}
		}
		return true
	})
	allRunning := time.Now()
	st := waitState(t, big, protocol.StateRunning, largestTimeout)
	require.NotNil(t, st.RunningAt)
	require.NotNil(t, st.Attempts[0].StartedAt)
	pw.mu.Lock()
	firstPod, lastPod := time.Time{}, time.Time{}
	nodes := map[string]bool{}
	for _, n := range pods {
		at := pw.running[n]
		if firstPod.IsZero() || at.Before(firstPod) {
			firstPod = at
		}
		if at.After(lastPod) {
			lastPod = at
		}
		nodes[pw.pods[n].Spec.NodeName] = true
	}
	pw.mu.Unlock()
	assert.Len(t, nodes, largestNodes, "a pod on every node")
	t.Logf("FIGURE largest job (%d workers): submit → granted %v, granted → job Running %v, submit → job Running %v (job's clock: created → Running %v); submit → first pod Running %v, → all pods Running %v (seen at %v)",
		largestNodes, st.Attempts[0].StartedAt.Sub(st.CreatedAt).Round(time.Millisecond),
		st.RunningAt.Sub(*st.Attempts[0].StartedAt).Round(time.Millisecond),
		st.RunningAt.Sub(submitted).Round(time.Millisecond), st.RunningAt.Sub(st.CreatedAt).Round(time.Millisecond),
		firstPod.Sub(submitted).Round(time.Millisecond), lastPod.Sub(submitted).Round(time.Millisecond), allRunning.Sub(submitted).Round(time.Millisecond))

	// A high job needing one node preempts the big one.
	hspec := jobSpec(largestLabel, "high", 1, nil)
	hspec.InstanceType = "a100.1gpu"
	preemptAt := time.Now()
	high := submit(t, hspec)
	pw.waitPods(t, largestTimeout, fmt.Sprintf("the %d pods of %s to be gone", largestNodes, big), func(pw *podWatch) bool {
		for _, n := range pods {
			if _, ok := pw.gone[n]; !ok {
				return false
			}
		}
		return true
	})
	allGone := time.Now()
	end := waitState(t, big, protocol.StatePreempted, largestTimeout)
	ended := time.Now()
	require.NotEmpty(t, end.Attempts)
	a := end.Attempts[0]
	require.NotNil(t, a.Preemptor, "the attempt names its preemptor")
	assert.Equal(t, high, a.Preemptor.Job)
	require.NotNil(t, a.EndedAt)
	require.NotNil(t, end.CompletedAt)
	pw.mu.Lock()
	marked, firstMarked, lastGone := 0, time.Time{}, time.Time{}
	for _, n := range pods {
		last := pw.last[n]
		if last != nil && last.Annotations[kubeb.AnnotationPreemptor] == high {
			marked++
		}
		if at, ok := pw.marked[n]; ok && (firstMarked.IsZero() || at.Before(firstMarked)) {
			firstMarked = at
		}
		if pw.gone[n].After(lastGone) {
			lastGone = pw.gone[n]
		}
	}
	pw.mu.Unlock()
	assert.Equal(t, largestNodes, marked, "every pod was marked with its preemptor before it went")
	t.Logf("FIGURE largest job preempted: high submitted → attempt ends (preempt received) %v; preempt received → job %s (all capacity released) %v; first pod marked → last pod gone %v; high submitted → all pods gone %v (seen), → job ended seen %v",
		a.EndedAt.Sub(preemptAt).Round(time.Millisecond), end.State, end.CompletedAt.Sub(*a.EndedAt).Round(time.Millisecond),
		lastGone.Sub(firstMarked).Round(time.Millisecond), allGone.Sub(preemptAt).Round(time.Millisecond), ended.Sub(preemptAt).Round(time.Millisecond))

	// The high job runs, on one of the big job's nodes.
	pw.waitPods(t, largestTimeout, "the high job's pod to run", func(pw *podWatch) bool {
		p := pw.pods[podName(high, 1, 0)]
		return p != nil && p.Status.Phase == corev1.PodRunning
	})
	hst := waitState(t, high, protocol.StateRunning, largestTimeout)
	assert.True(t, nodes[pw.pod(podName(high, 1, 0)).Spec.NodeName], "the high job runs on a node of allocation largest")
	t.Logf("FIGURE high job: submit → Running %v", hst.RunningAt.Sub(preemptAt).Round(time.Millisecond))
	exitPod(t, podName(high, 1, 0), 0)
	waitState(t, high, protocol.StateCompleted, largestTimeout)

	// What the server recorded.
	jf := historyOf(t, big)
	af := historyOf(t, protocol.AllocatorWorkflowID("K", largestLabel))
	t.Logf("FIGURE history of the largest job: %s", jf)
	t.Logf("FIGURE history of allocator K/largest: %s", af)
	assert.Empty(t, jf.failed(), "no workflow task of the job failed (other than UnhandledCommand)")
	assert.Empty(t, af.failed(), "no workflow task of the allocator failed (other than UnhandledCommand)")
	assert.Less(t, jf.maxPending, protocol.TemporalPendingActivitiesLimit)
}
