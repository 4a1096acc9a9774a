package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

	trainq "github.com/trainq/trainq/client"
	kubeb "github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/internal/kubetest"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

// EnvLargest runs TestKubeLargestJob, which takes 5 to 9 minutes on two
// cores: too long for every `make test`.
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

// EnvLargestDB names a file where TestKubeLargestJob's dev server keeps its
// database, to read the histories after the run.
const EnvLargestDB = "TRAINQ_KUBE_LARGEST_DB"

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
	if db := os.Getenv(EnvLargestDB); db != "" {
		// Kept for reading the histories after the run (temporal server
		// start-dev --db-filename db).
		_ = os.Remove(db)
		args = append(args, "--db-filename", db)
	}
	// The server's errors (a loaded SQLite timing out) go to a file, not the test's output.
	logPath := filepath.Join(os.TempDir(), "trainq-kube-largest-temporal.log")
	logf, err := os.Create(logPath)
	require.NoError(t, err)
	t.Cleanup(func() { _ = logf.Close() })
	srv, err := testsuite.StartDevServer(context.Background(), testsuite.DevServerOptions{ExistingPath: bin, LogLevel: "error", ExtraArgs: args, Stdout: logf, Stderr: logf})
	require.NoError(t, err)
	t.Logf("the test's dev server logs to %s", logPath)
	hostPort, c := env.hostPort, env.client
	env.hostPort, env.client = srv.FrontendHostPort(), srv.Client()
	t.Cleanup(func() {
		env.hostPort, env.client = hostPort, c
		if err := srv.Stop(); err != nil {
			t.Logf("stop the test's dev server: %v", err)
		}
	})
}

// EnvLargestNodeTimeout sets node_timeout for TestKubeLargestJob
// (default: trainq's default, protocol.DefaultNodeTimeout). The package's
// config says 10s, so that its node-loss tests are quick; see ownConfig.
const EnvLargestNodeTimeout = "TRAINQ_KUBE_LARGEST_NODE_TIMEOUT"

// ownConfig points startWorker at a config of the test's own: the
// package's, with trainq's default node_timeout. node_timeout is also how
// long a node activity may wait to be picked up by its node's agent
// (ScheduleToStartTimeout) before the node counts as lost, and a job of
// 1,024 workers schedules 1,024 of them at once, one per node task queue:
// a dev server on a small machine hands them out at about 60 to 100 a
// second, so with 10s a third to a half of them time out and the attempt
// ends as a node loss (and reruns, again and again).
func ownConfig(t *testing.T) {
	t.Helper()
	timeout := protocol.DefaultNodeTimeout.String()
	if v := os.Getenv(EnvLargestNodeTimeout); v != "" {
		timeout = v
	}
	text := fmt.Sprintf(testConfig, filepath.Join(t.TempDir(), "data"), env.cluster.Kubeconfig)
	require.Contains(t, text, "\nnode_timeout: 10s\n")
	text = strings.Replace(text, "\nnode_timeout: 10s\n", "\nnode_timeout: "+timeout+"\n", 1)
	path := filepath.Join(t.TempDir(), "trainq.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	old := env.configPath
	env.configPath = path
	t.Cleanup(func() { env.configPath = old })
	t.Logf("node_timeout: %s", timeout)
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
	runs, events int
	// failedByCause counts WorkflowTaskFailed events by cause (with the
	// failure's message, but for UnhandledCommand and ForceCloseCommand).
	failedByCause map[string]int
	timedOutTasks int // WorkflowTaskTimedOut
	maxPending    int // most activities scheduled and not yet closed at once (in one run)
	activities    map[string]*activityFacts
	signalsSent   int                  // SignalExternalWorkflowExecutionInitiated
	signaled      map[string]time.Time // when each signal was first received
	closed        time.Time            // when the latest run closed (zero while it runs)
}

// activityFacts is one activity type's activities in a history.
type activityFacts struct {
	scheduled int
	closed    map[string]int  // by how: Completed, Canceled, Failed, or TimedOut and the timeout's type
	durations []time.Duration // from scheduled to closed
}

const (
	causeUnhandledCommand = "UnhandledCommand"
	causeForceClose       = "ForceCloseCommand"
)

func historyOf(t *testing.T, workflowID string) historyFacts {
	t.Helper()
	f := historyFacts{failedByCause: map[string]int{}, activities: map[string]*activityFacts{}, signaled: map[string]time.Time{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runID := ""
	for {
		it := env.client.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		type scheduled struct {
			name string
			at   time.Time
		}
		sched := map[int64]scheduled{}
		prev := ""
		closeActivity := func(ev *historypb.HistoryEvent, id int64, how string) {
			s, ok := sched[id]
			if !ok {
				return
			}
			delete(sched, id)
			a := f.activities[s.name]
			a.closed[how]++
			a.durations = append(a.durations, ev.GetEventTime().AsTime().Sub(s.at))
		}
		for it.HasNext() {
			ev, err := it.Next()
			require.NoError(t, err)
			f.events++
			at := ev.GetEventTime().AsTime()
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
				prev = ev.GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
				name := ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
				sched[ev.GetEventId()] = scheduled{name, at}
				if f.activities[name] == nil {
					f.activities[name] = &activityFacts{closed: map[string]int{}}
				}
				f.activities[name].scheduled++
				f.maxPending = max(f.maxPending, len(sched))
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
				closeActivity(ev, ev.GetActivityTaskCompletedEventAttributes().GetScheduledEventId(), "Completed")
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED:
				closeActivity(ev, ev.GetActivityTaskFailedEventAttributes().GetScheduledEventId(), "Failed")
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
				closeActivity(ev, ev.GetActivityTaskCanceledEventAttributes().GetScheduledEventId(), "Canceled")
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
				a := ev.GetActivityTaskTimedOutEventAttributes()
				how := "TimedOut"
				if info := a.GetFailure().GetTimeoutFailureInfo(); info != nil {
					how += "(" + info.GetTimeoutType().String() + ")"
				}
				closeActivity(ev, a.GetScheduledEventId(), how)
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:
				f.failedByCause[failCause(ev)]++
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
				f.timedOutTasks++
			case enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
				f.signalsSent++
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
				name := ev.GetWorkflowExecutionSignaledEventAttributes().GetSignalName()
				if _, seen := f.signaled[name]; !seen {
					f.signaled[name] = at
				}
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
				enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
				enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
				if runID == "" {
					f.closed = at
				}
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
	switch a.GetCause() {
	case enumspb.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND:
		return causeUnhandledCommand
	case enumspb.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND:
		return causeForceClose
	}
	cause := a.GetCause().String()
	if msg := a.GetFailure().GetMessage(); msg != "" {
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		cause += ": " + msg
	}
	return cause
}

// failed is the workflow task failures that point at trainq: not
// UnhandledCommand (an event arrived while the task completed: the SDK
// runs the task again) nor ForceCloseCommand (the server failed a task in
// flight because more than history.maximumBufferedEventsBatch events, 100,
// arrived meanwhile, and scheduled a new one: the work of one task is
// lost, nothing else).
func (f historyFacts) failed() map[string]int {
	out := map[string]int{}
	for c, n := range f.failedByCause {
		if c != causeUnhandledCommand && c != causeForceClose {
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
	names := make([]string, 0, len(f.activities))
	for n := range f.activities {
		names = append(names, n)
	}
	sort.Strings(names)
	var acts []string
	for _, n := range names {
		a := f.activities[n]
		hows := make([]string, 0, len(a.closed))
		for h, c := range a.closed {
			hows = append(hows, fmt.Sprintf("%s %d", h, c))
		}
		sort.Strings(hows)
		d := slices.Clone(a.durations)
		slices.Sort(d)
		took := ""
		if len(d) > 0 {
			took = fmt.Sprintf(", scheduled→closed p50 %v max %v", d[len(d)/2].Round(100*time.Millisecond), d[len(d)-1].Round(100*time.Millisecond))
		}
		acts = append(acts, fmt.Sprintf("%s %d (%s%s)", n, a.scheduled, strings.Join(hows, ", "), took))
	}
	return fmt.Sprintf("%d events in %d run(s); at most %d activities pending at once; %d signals sent; failed workflow tasks: [%s]; timed out workflow tasks: %d; activities: %s",
		f.events, f.runs, f.maxPending, f.signalsSent, strings.Join(causes, ", "), f.timedOutTasks, strings.Join(acts, "; "))
}

// TestKubeLargestJob runs the largest job the API accepts, n_workers
// protocol.MaxNWorkers with a pod on each of as many 1-GPU nodes, has a
// one-node job of a higher class preempt it, and checks from the server that
// no workflow task of the job or of the allocator failed, and that the job
// never had more than Temporal's limit of activities pending. It runs on a
// dev server of its own (see ownDevServer) and with trainq's default
// node_timeout (see ownConfig), and takes 5 to 9 minutes: set
// TRAINQ_KUBE_LARGEST=1 to run it. The FIGURE lines say how long each step
// took and what the histories hold.
func TestKubeLargestJob(t *testing.T) {
	if os.Getenv(EnvLargest) == "" {
		t.Skipf("set %s=1 to run the largest job (%d workers; 5 to 9 minutes on 2 cores)", EnvLargest, largestNodes)
	}
	begin := time.Now()
	addLargestNodes(t, largestNodes)
	t.Logf("FIGURE %d nodes created and Ready in %v", largestNodes, time.Since(begin).Round(time.Millisecond))

	if os.Getenv(EnvLargestDefaultLimits) == "" {
		ownDevServer(t)
	}
	ownConfig(t)
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
	// A new allocator fences every node until its agent has said what runs
	// there (NodeInventory, then FenceNode): nothing is granted on a node
	// before. The job is submitted once every node is free, so that its
	// figures do not include that.
	eventually(t, largestTimeout, "the allocator of allocation largest to know its nodes", func() bool {
		return len(largestView().Nodes) == largestNodes
	})
	knows := time.Since(begin)
	eventually(t, largestTimeout, "every node of allocation largest to be free", func() bool {
		return freeNodes(largestView()) == largestNodes
	})
	t.Logf("FIGURE trainq-worker started → allocator knows the %d nodes %v, → all free (inventoried and fenced) %v",
		largestNodes, knows.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))

	// The big job: every node, 1 GPU each, lowest class, no retry.
	spec := fixture.Job{Region: "K", Allocation: largestLabel, Class: "low", Workers: largestNodes, Script: "python3 train.py"}.Spec()
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
	st := waitState(t, big, protocol.StateRunning, largestTimeout)
	require.NotNil(t, st.RunningAt)
	require.NotNil(t, st.Attempts[0].StartedAt)
	assert.Equal(t, 1, st.Attempt, "the first attempt runs")
	pw.mu.Lock()
	lastPod := time.Time{}
	nodes := map[string]bool{}
	for _, n := range pods {
		if at := pw.running[n]; at.After(lastPod) {
			lastPod = at
		}
		nodes[pw.pods[n].Spec.NodeName] = true
	}
	pw.mu.Unlock()
	assert.Len(t, nodes, largestNodes, "a pod on every node")
	t.Logf("FIGURE largest job (%d workers): submit → Running %v (submit → granted %v, granted → Running %v); submit → last pod Running %v",
		largestNodes, st.RunningAt.Sub(st.CreatedAt).Round(time.Millisecond),
		st.Attempts[0].StartedAt.Sub(st.CreatedAt).Round(time.Millisecond), st.RunningAt.Sub(*st.Attempts[0].StartedAt).Round(time.Millisecond),
		lastPod.Sub(submitted).Round(time.Millisecond))

	// A high job needing one node preempts the big one.
	hspec := fixture.Job{Region: "K", Allocation: largestLabel, Class: "high", Script: "python3 train.py"}.Spec()
	hspec.InstanceType = "a100.1gpu"
	high := submit(t, hspec)
	pw.waitPods(t, largestTimeout, fmt.Sprintf("the %d pods of %s to be gone", largestNodes, big), func(pw *podWatch) bool {
		for _, n := range pods {
			if _, ok := pw.gone[n]; !ok {
				return false
			}
		}
		return true
	})
	end := waitState(t, big, protocol.StatePreempted, largestTimeout)
	require.NotEmpty(t, end.Attempts)
	assert.Len(t, end.Attempts, 1, "one attempt, ended by the preemption")
	a := end.Attempts[0]
	require.NotNil(t, a.Preemptor, "the attempt names its preemptor")
	assert.Equal(t, high, a.Preemptor.Job)
	pw.mu.Lock()
	marked, firstMarked, lastGone := 0, time.Time{}, time.Time{}
	for _, n := range pods {
		if last := pw.last[n]; last != nil && last.Annotations[kubeb.AnnotationPreemptor] == high {
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
	// The annotation names the preemptor only if the stop could ask the
	// job why it stops (a status query): report how many could.
	t.Logf("FIGURE %d of %d pods were marked with their preemptor", marked, largestNodes)

	// The high job runs, on one of the big job's nodes.
	pw.waitPods(t, largestTimeout, "the high job's pod to run", func(pw *podWatch) bool {
		p := pw.pods[podName(high, 1, 0)]
		return p != nil && p.Status.Phase == corev1.PodRunning
	})
	hst := waitState(t, high, protocol.StateRunning, largestTimeout)
	assert.True(t, nodes[pw.pod(podName(high, 1, 0)).Spec.NodeName], "the high job runs on a node of allocation largest")
	// Every other node is free again: released, and fenced nodes cleared.
	eventually(t, largestTimeout, "every node but the high job's to be free", func() bool {
		return freeNodes(largestView()) == largestNodes-1
	})
	allFree := time.Now()

	jf := historyOf(t, big)
	preempted, ok := jf.signaled[protocol.SignalPreempt]
	require.True(t, ok, "the job's history has the preempt signal")
	require.False(t, jf.closed.IsZero())
	t.Logf("FIGURE preemption of the largest job: high submitted → preempt received %v; preempt received → job %s (every release delivered) %v, → every other node free %v; first pod marked → last pod gone %v; high job: submit → Running %v",
		preempted.Sub(hst.CreatedAt).Round(time.Millisecond), end.State, jf.closed.Sub(preempted).Round(time.Millisecond),
		allFree.Sub(preempted).Round(time.Millisecond),
		lastGone.Sub(firstMarked).Round(time.Millisecond), hst.RunningAt.Sub(hst.CreatedAt).Round(time.Millisecond))
	exitPod(t, podName(high, 1, 0), 0)
	waitState(t, high, protocol.StateCompleted, largestTimeout)

	// What the server recorded.
	af := historyOf(t, protocol.AllocatorWorkflowID("K", largestLabel))
	t.Logf("FIGURE history of the largest job: %s", jf)
	t.Logf("FIGURE history of allocator K/largest: %s", af)
	assert.Empty(t, jf.failed(), "no workflow task of the job failed (but for UnhandledCommand and ForceCloseCommand)")
	assert.Empty(t, af.failed(), "no workflow task of the allocator failed (but for UnhandledCommand and ForceCloseCommand)")
	assert.Less(t, jf.maxPending, protocol.TemporalPendingActivitiesLimit)
	assert.Less(t, jf.events, protocol.TemporalHistoryEventsLimit)
}

// largestView is the allocator's view of allocation largest (empty while
// it does not answer).
func largestView() protocol.QueueView {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, _ := trainq.New(env.client, nil).Queue(ctx, "K", largestLabel)
	return v
}

// freeNodes counts the nodes the allocator can grant now: every GPU free,
// not lost nor fenced, and the allocator not recovering.
func freeNodes(v protocol.QueueView) int {
	if v.Recovering {
		return 0
	}
	fenced := map[string]bool{}
	for _, f := range v.Fenced {
		fenced[f.Node] = true
	}
	n := 0
	for _, nd := range v.Nodes {
		if !nd.Lost && !fenced[nd.Name] && nd.FreeGPUs == nd.GPUs {
			n++
		}
	}
	return n
}
