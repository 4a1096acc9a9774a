package kube

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	kubeb "github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// waitNotice waits until the pod carries its stop notice (the annotation
// its downward-API volume shows at $TRAINQ_NOTICE_FILE) and returns it.
func (pw *podWatch) waitNotice(t *testing.T, name string) protocol.WorkerNotice {
	t.Helper()
	var raw string
	pw.wait(t, "a notice on pod "+name, func(pw *podWatch) bool {
		if p := pw.pods[name]; p != nil {
			raw = p.Annotations[kubeb.AnnotationNotice]
		}
		return raw != ""
	})
	var n protocol.WorkerNotice
	require.NoError(t, json.Unmarshal([]byte(raw), &n), raw)
	return n
}

// noticeVolume is the pod's downward-API volume that shows its notice.
func noticeVolume(p *corev1.Pod) *corev1.DownwardAPIVolumeSource {
	for _, v := range p.Spec.Volumes {
		if v.DownwardAPI != nil && len(v.DownwardAPI.Items) > 0 &&
			v.DownwardAPI.Items[0].FieldRef.FieldPath == "metadata.annotations['"+kubeb.AnnotationNotice+"']" {
			return v.DownwardAPI
		}
	}
	return nil
}

// TestKubePreemptionNotice, on kwok: the victim's pod gets its notice
// (reason preempted, the preemptor's class and kind, the deadline) as an
// annotation its downward-API volume shows; the pod is not deleted while
// the notice runs. Its container then exits (the worker saved and left):
// the preemptor's pod is created and runs before the deadline, and the
// victim reruns in attempt 2's pod.
func TestKubePreemptionNotice(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	low := fixture.Job{Region: "K", Allocation: "notice", Class: "low", Script: "python3 train.py"}.Spec()
	low.MaxRetry = 1
	victim := submit(t, low)
	victimPod := podName(victim, 1, 0)
	pw.waitRunning(t, victimPod)
	waitState(t, victim, protocol.StateRunning, long)
	require.NotNil(t, noticeVolume(pw.pod(victimPod)), "the pod shows its notice annotation at $TRAINQ_NOTICE_FILE")

	preemptor := submit(t, fixture.Job{Region: "K", Allocation: "notice", Class: "high", Script: "python3 train.py", Env: map[string]string{"KWOK_EXIT_AFTER": "2s"}}.Spec())
	n := pw.waitNotice(t, victimPod)
	assert.Equal(t, protocol.NoticeReasonPreempted, n.Reason)
	require.NotNil(t, n.By)
	assert.Equal(t, "high", n.By.Class)
	assert.Equal(t, victim, n.Job)
	assert.WithinDuration(t, time.Now().Add(30*time.Second), n.Deadline, 10*time.Second, "deadline: the allocation's 30 s notice")
	assert.Nil(t, pw.pod(podName(preemptor, 1, 0)), "nothing starts on the victim's GPUs during its notice")
	pw.mu.Lock()
	_, gone := pw.gone[victimPod]
	pw.mu.Unlock()
	assert.False(t, gone, "the victim's pod is not deleted before it exits or its deadline")

	exitPod(t, victimPod, 0) // the worker saved its checkpoint and exited
	pw.waitRunning(t, podName(preemptor, 1, 0))
	pw.mu.Lock()
	preemptorRunning := pw.running[podName(preemptor, 1, 0)]
	pw.mu.Unlock()
	assert.True(t, preemptorRunning.Before(n.Deadline), "the preemptor ran at %s, before the deadline %s", preemptorRunning, n.Deadline)

	waitState(t, preemptor, protocol.StateCompleted, long)
	pw.waitRunning(t, podName(victim, 2, 0))
	exitPod(t, podName(victim, 2, 0), 0)
	st := waitState(t, victim, protocol.StateCompleted, long)
	assert.Equal(t, 1, st.Restarts, "exiting on the notice is a preemption")
	require.Len(t, st.Attempts, 2)
	assert.Contains(t, st.Attempts[0].EndReason, "its workers exited on the notice")
	require.NotNil(t, st.Attempts[0].ExitedOnNoticeAt)
}

// TestKubeCancelNoticeThenDeadline, on kwok: a cancelled job's pod gets a
// notice with reason cancelled; its container does not exit, so the pod
// is stopped at the deadline, not before, and the job ends Stopped.
func TestKubeCancelNoticeThenDeadline(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	job := submit(t, fixture.Job{Region: "K", Allocation: "notice", Class: "medium", Script: "python3 train.py"}.Spec())
	pod := podName(job, 1, 0)
	pw.waitRunning(t, pod)
	waitState(t, job, protocol.StateRunning, long)
	require.NoError(t, env.client.CancelWorkflow(t.Context(), job, ""))
	n := pw.waitNotice(t, pod)
	assert.Equal(t, protocol.NoticeReasonCancelled, n.Reason)
	assert.Nil(t, n.By)

	st := waitState(t, job, protocol.StateStopped, 2*long)
	pw.mu.Lock()
	marked := pw.marked[pod]
	pw.mu.Unlock()
	require.False(t, marked.IsZero(), "the pod was stopped")
	assert.False(t, marked.Before(n.Deadline), "the pod was stopped at %s, not before the deadline %s", marked, n.Deadline)
	require.Len(t, st.Attempts, 1)
	assert.Equal(t, protocol.NoticeReasonCancelled, st.Attempts[0].NoticeReason)
	assert.Nil(t, st.Attempts[0].ExitedOnNoticeAt)
}
