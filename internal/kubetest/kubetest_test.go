package kubetest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// waitPod watches a pod until cond holds for it (deleted: the pod is gone).
func waitPod(t *testing.T, c *Cluster, ns, name string, cond func(p *corev1.Pod, deleted bool) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if ok && cond(p, ev.Type == watch.Deleted) {
			return p
		}
	}
	t.Fatalf("pod %s: the condition never held: %v", name, ctx.Err())
	return nil
}

func bareePod(name, node string, env ...corev1.EnvVar) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "worker", Image: "busybox", Command: []string{"true"}, Env: env,
		}}},
	}
}

// TestClusterRunsPodsThroughTheirLife checks the test cluster itself: a
// GPU node becomes Ready, a pod bound to it runs, one told to fail ends
// Failed with its exit code, a deleted pod disappears, and a node taken
// down turns NotReady and comes back.
func TestClusterRunsPodsThroughTheirLife(t *testing.T) {
	c := Start(t)
	ctx := context.Background()
	if err := c.AddNode(ctx, Node{Name: "gpu-1", GPUs: 8}); err != nil {
		t.Fatal(err)
	}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, "gpu-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := n.Status.Allocatable["nvidia.com/gpu"]; q.Value() != 8 {
		t.Fatalf("allocatable nvidia.com/gpu = %v, want 8", q.String())
	}
	pods := c.Client.CoreV1().Pods("default")
	start := time.Now()
	if _, err := pods.Create(ctx, bareePod("runs", "gpu-1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, "default", "runs", func(p *corev1.Pod, _ bool) bool { return p.Status.Phase == corev1.PodRunning })
	t.Logf("bound pod Running after %v", time.Since(start).Round(time.Millisecond))
	// The pod log API reaches kwok's kubelet API, which serves PodLog.
	if got, err := pods.GetLogs("runs", &corev1.PodLogOptions{}).DoRaw(ctx); err != nil || string(got) != PodLogText {
		t.Fatalf("pod log %q (%v), want %q", got, err, PodLogText)
	}

	if _, err := pods.Create(ctx, bareePod("fails", "gpu-1",
		corev1.EnvVar{Name: "KWOK_EXIT_AFTER", Value: "300ms"}, corev1.EnvVar{Name: "KWOK_EXIT_CODE", Value: "3"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, c, "default", "fails", func(p *corev1.Pod, _ bool) bool { return p.Status.Phase == corev1.PodFailed })
	if code := p.Status.ContainerStatuses[0].State.Terminated.ExitCode; code != 3 {
		t.Fatalf("exit code %d, want 3", code)
	}

	if err := pods.Delete(ctx, "runs", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, "default", "runs", func(_ *corev1.Pod, deleted bool) bool { return deleted })

	if err := c.SetNodeDown(ctx, "gpu-1", true); err != nil {
		t.Fatal(err)
	}
	if err := c.SetNodeDown(ctx, "gpu-1", false); err != nil {
		t.Fatal(err)
	}
}
