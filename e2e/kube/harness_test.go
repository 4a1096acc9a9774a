// Package kube tests trainq end to end on a real Kubernetes control plane:
// kube-apiserver and etcd (built by tools/kube/install.sh) with kwok playing
// the kubelets, a real Temporal dev server, and the real trainq-worker
// binary with backend: kubernetes. The test plays what a kubelet and a
// container would do where it needs to decide when: it ends a container by
// setting its pod's status, and holds a stopping pod with a finalizer.
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

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	trainq "github.com/trainq/trainq/client"
	kubeb "github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/internal/kubetest"
	"github.com/trainq/trainq/internal/testenv"
	"github.com/trainq/trainq/protocol"
)

const namespace = "trainq-e2e"

// Every test has its own allocation and nodes.
const testConfig = `
data_dir: %s
default_region: K
default_allocation: seed
reclaim_interval: 2s
node_timeout: 10s
metrics_addr: ""
backend: kubernetes
kubernetes:
  namespace: ` + namespace + `
  kubeconfig: %s
  default_image: busybox:1.36
  image_pull_secrets: [regcred]
  image_pull_timeout: 3s
regions:
  - name: K
    allocations:
      - name: seed
        stop_grace_period: 20s
        nodes:
          - {name: seed-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: seed-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: seed-3, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: seed-4, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: preempt
        stop_grace_period: 5s
        nodes:
          - {name: preempt-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: notice
        stop_grace_period: 5s
        preemption_notice: 30s
        nodes:
          - {name: notice-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: basic
        stop_grace_period: 5s
        nodes:
          - {name: basic-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: basic-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: lost
        stop_grace_period: 5s
        nodes:
          - {name: lost-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: lost-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: selected
        stop_grace_period: 5s
        node_selector: {trainq.io/allocation: selected}
      - name: relabel-a
        stop_grace_period: 5s
        node_selector: {trainq.io/allocation: relabel-a}
      - name: relabel-b
        stop_grace_period: 5s
        node_selector: {trainq.io/allocation: relabel-b}
      - name: racked
        stop_grace_period: 5s
        topology: [example.com/rack]
        node_selector: {trainq.io/allocation: racked}
      - name: defrag
        stop_grace_period: 5s
        preemption_notice: 30s
        topology: [example.com/rack]
        required_topology: example.com/rack
        defragment_after: 1s
        min_runtime_before_move: 1s
        node_selector: {trainq.io/allocation: defrag}
      - name: largest
        stop_grace_period: 5s
        max_loss_gpu_hours: -1
        node_selector: {trainq.io/allocation: largest}
      - name: unknown
        stop_grace_period: 5s
        nodes:
          - {name: unknown-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: unknown-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: stuck
        stop_grace_period: 5s
        nodes:
          - {name: stuck-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
      - name: fenced
        stop_grace_period: 5s
        nodes:
          - {name: fenced-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
          - {name: fenced-2, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
`

var env struct {
	dir        string
	binDir     string
	configPath string
	cfg        *config.Config
	hostPort   string
	client     client.Client
	cluster    *kubetest.Cluster
}

func TestMain(m *testing.M) {
	if os.Getenv("TRAINQ_SKIP_E2E") != "" {
		fmt.Println("e2e/kube: skipped (TRAINQ_SKIP_E2E is set)")
		os.Exit(0)
	}
	if _, _, _, err := kubetest.Binaries(); err != nil {
		if os.Getenv(kubetest.EnvRequire) == "1" {
			fmt.Fprintln(os.Stderr, "e2e/kube:", err)
			os.Exit(1)
		}
		fmt.Println("e2e/kube: skipped:", err)
		os.Exit(0)
	}
	testenv.Bootstrap{Package: "e2e/kube", Root: "../..", Build: map[string]string{"trainq-worker": "./cmd/trainq-worker"}}.Main(m, run)
}

func run(m *testing.M, h *testenv.Harness) int {
	temporalBin := h.TemporalBin
	env.dir, env.binDir = h.Dir, h.BinDir
	var err error
	begin := time.Now()
	env.cluster, err = kubetest.RunRetried(filepath.Join(env.dir, "cluster"), func(format string, args ...any) { fmt.Printf(format+"\n", args...) })
	if err != nil {
		return h.Fail("test cluster", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	defer env.cluster.Stop()
	if err := env.cluster.CreateNamespace(ctx, namespace); err != nil {
		panic(err)
	}
	env.configPath = filepath.Join(env.dir, "trainq.yaml")
	if err := os.WriteFile(env.configPath, []byte(fmt.Sprintf(testConfig, filepath.Join(env.dir, "data"), env.cluster.Kubeconfig)), 0o644); err != nil {
		panic(err)
	}
	if env.cfg, err = config.Load(env.configPath); err != nil {
		panic(err)
	}
	for _, ref := range env.cfg.Allocations() {
		for _, n := range ref.Allocation.Nodes {
			if err := env.cluster.AddNode(ctx, kubetest.Node{Name: n.Name, GPUs: n.GPUs, CPU: n.CPU, MemoryGi: n.RAMGB}); err != nil {
				panic(err)
			}
		}
	}
	if err := env.cluster.AddNode(ctx, selectedNode("sel-1")); err != nil {
		panic(err)
	}
	fmt.Printf("e2e/kube: test cluster with %d nodes ready in %v\n", len(env.cfg.Nodes()), time.Since(begin).Round(time.Millisecond))
	srv, err := testenv.StartDevServer(temporalBin)
	if err != nil {
		return h.Fail("dev server", err)
	}
	defer func() { _ = srv.Stop() }()
	env.hostPort = srv.FrontendHostPort()
	env.client = srv.Client()
	code := m.Run()
	fmt.Print(figureReport())
	return code
}

const long = 90 * time.Second

// startWorker starts trainq-worker with backend: kubernetes; the test stops it at its end.
func startWorker(t *testing.T) *testenv.WorkerProcess {
	t.Helper()
	w, err := testenv.StartWorker(filepath.Join(env.binDir, "trainq-worker"),
		[]string{"--config", env.configPath}, []string{"TEMPORAL_ADDRESS=" + env.hostPort})
	require.NoError(t, err)
	t.Cleanup(func() {
		w.Stop(30 * time.Second)
		if t.Failed() {
			t.Logf("trainq-worker log:\n%s", w.LogTail(80))
		}
	})
	return w
}

func submit(t *testing.T, spec protocol.JobSpec) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := trainq.New(env.client, env.cfg).Submit(ctx, spec, trainq.SubmitOptions{})
	require.NoError(t, err)
	return sub.JobName
}

func status(t *testing.T, job string) protocol.JobStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := trainq.New(env.client, nil).Status(ctx, job)
	require.NoError(t, err)
	return st
}

// eventually polls cond until it holds: the way to wait for a state that
// Temporal's workflows reach (they have no watch); pods are awaited with
// the API's watch instead (see pods).
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, timeout, what, cond)
}

func waitState(t *testing.T, job string, want protocol.JobState, timeout time.Duration) protocol.JobStatus {
	t.Helper()
	return testenv.WaitState(t, env.client, job, want, timeout)
}

// podWatch follows every trainq pod of the namespace through the API's
// watch, and lets a test wait for a condition on them.
type podWatch struct {
	mu       sync.Mutex
	cond     *sync.Cond
	pods     map[string]*corev1.Pod       // current, by name
	gone     map[string]time.Time         // when each deleted pod was seen gone
	running  map[string]time.Time         // when each pod was first seen Running
	marked   map[string]time.Time         // when each pod was first seen marked as stopping
	last     map[string]*corev1.Pod       // the last state of each deleted pod
	attempts map[attemptKey]*attemptTimes // for the run's figures
	stop     func()
}

func watchPods(t *testing.T) *podWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := env.cluster.Client.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{LabelSelector: kubeb.LabelManagedBy + "=" + kubeb.ManagedBy})
	require.NoError(t, err)
	pw := &podWatch{pods: map[string]*corev1.Pod{}, gone: map[string]time.Time{}, running: map[string]time.Time{}, marked: map[string]time.Time{}, last: map[string]*corev1.Pod{}, attempts: map[attemptKey]*attemptTimes{}}
	pw.cond = sync.NewCond(&pw.mu)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			pw.mu.Lock()
			pw.note(p, ev.Type == watch.Deleted, now)
			if ev.Type == watch.Deleted {
				delete(pw.pods, p.Name)
				pw.gone[p.Name] = now
				pw.last[p.Name] = p
			} else {
				pw.pods[p.Name] = p
				if _, seen := pw.running[p.Name]; !seen && p.Status.Phase == corev1.PodRunning {
					pw.running[p.Name] = now
				}
				if _, seen := pw.marked[p.Name]; !seen && p.Annotations[kubeb.AnnotationStopReason] != "" {
					pw.marked[p.Name] = now
				}
			}
			pw.cond.Broadcast()
			pw.mu.Unlock()
		}
	}()
	pw.stop = func() { cancel(); w.Stop(); <-done; pw.collect() }
	t.Cleanup(pw.stop)
	return pw
}

// wait blocks until cond holds on the pods (under the lock), or fails the test.
func (pw *podWatch) wait(t *testing.T, what string, cond func(pw *podWatch) bool) {
	t.Helper()
	timer := time.AfterFunc(long, func() { pw.mu.Lock(); pw.cond.Broadcast(); pw.mu.Unlock() })
	defer timer.Stop()
	deadline := time.Now().Add(long)
	pw.mu.Lock()
	defer pw.mu.Unlock()
	for !cond(pw) {
		if time.Now().After(deadline) {
			names := make([]string, 0, len(pw.pods))
			for n, p := range pw.pods {
				names = append(names, fmt.Sprintf("%s(%s on %s)", n, p.Status.Phase, p.Spec.NodeName))
			}
			sort.Strings(names)
			t.Fatalf("timed out after %s waiting for %s; pods: %s", long, what, strings.Join(names, ", "))
		}
		pw.cond.Wait()
	}
}

// pod returns the current state of a pod (nil if none).
func (pw *podWatch) pod(name string) *corev1.Pod {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return pw.pods[name]
}

func podName(job string, attempt, worker int) string {
	return fmt.Sprintf("%s-a%d-w%d", kubeb.JobBase(job), attempt, worker)
}

// waitRunning waits until the pods are Running.
func (pw *podWatch) waitRunning(t *testing.T, names ...string) {
	t.Helper()
	pw.wait(t, fmt.Sprintf("pods %v to run", names), func(pw *podWatch) bool {
		for _, n := range names {
			if p := pw.pods[n]; p == nil || p.Status.Phase != corev1.PodRunning {
				return false
			}
		}
		return true
	})
	pw.timeRunning()
}

// waitGone waits until the pods were deleted.
func (pw *podWatch) waitGone(t *testing.T, names ...string) {
	t.Helper()
	pw.wait(t, fmt.Sprintf("pods %v to be gone", names), func(pw *podWatch) bool {
		for _, n := range names {
			if _, ok := pw.gone[n]; !ok {
				return false
			}
		}
		return true
	})
}

// exitPod plays the container ending with code: the pod's status says so,
// as a kubelet would write it.
func exitPod(t *testing.T, name string, code int32) {
	t.Helper()
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	exitPodWith(t, name, code, reason)
}

// exitPodWith is exitPod with the kubelet's reason for the end (OOMKilled...).
func exitPodWith(t *testing.T, name string, code int32, reason string) {
	t.Helper()
	ctx := context.Background()
	pods := env.cluster.Client.CoreV1().Pods(namespace)
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	now := metav1.Now()
	phase := corev1.PodSucceeded
	if code != 0 {
		phase = corev1.PodFailed
	}
	started := now
	if cs := p.Status.ContainerStatuses; len(cs) > 0 && cs[0].State.Running != nil {
		started = cs[0].State.Running.StartedAt
	}
	p.Status.Phase = phase
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: kubeb.ContainerName, Image: p.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: started, FinishedAt: now}},
	}}
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)
}

const holdFinalizer = "test.trainq.io/hold"

// holdPod keeps the pod from going away when it is deleted (its containers
// "take their time" to stop) until releasePod.
func holdPod(t *testing.T, name string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, holdFinalizer)
	_, err := env.cluster.Client.CoreV1().Pods(namespace).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

func releasePod(t *testing.T, name string) {
	t.Helper()
	_, err := env.cluster.Client.CoreV1().Pods(namespace).Patch(context.Background(), name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	require.NoError(t, err)
}

// events returns the events recorded for a pod.
func events(t *testing.T, pod string) []corev1.Event {
	t.Helper()
	list, err := env.cluster.Client.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	require.NoError(t, err)
	return list.Items
}

// selectedNode is a node that allocation "selected" picks by its labels.
func selectedNode(name string) kubetest.Node {
	return kubetest.Node{Name: name, GPUs: 2, CPU: 16, MemoryGi: 128,
		Labels: map[string]string{"trainq.io/allocation": "selected", kubeb.FamilyLabel: "a100"}}
}
