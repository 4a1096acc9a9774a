package kube

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	corev1 "k8s.io/api/core/v1"

	trainq "github.com/trainq/trainq/client"
	kubeb "github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// figures collects, over every test of the run, the timings the closing
// note reports: from an attempt's grant to all its pods Running, and from
// the preemption of an attempt (its first pod marked) to its last pod gone.
var figures struct {
	mu                            sync.Mutex
	grantToRunning, preemptToGone []time.Duration
}

// attemptTimes is what a podWatch saw of the pods of one attempt.
type attemptTimes struct {
	job       string
	attempt   int
	pods      map[string]bool
	running   map[string]time.Time
	gone      map[string]time.Time
	marked    time.Time // first pod marked as stopping
	preempted bool      // marked with a preemptor
	timed     bool      // grant → all pods Running recorded
}

type attemptKey struct {
	job     string
	attempt int
}

// note records what a pod event says about its attempt (under pw.mu).
func (pw *podWatch) note(p *corev1.Pod, deleted bool, now time.Time) {
	job := p.Annotations[kubeb.AnnotationJobName]
	attempt, err := strconv.Atoi(p.Labels[kubeb.LabelAttempt])
	if job == "" || err != nil {
		return
	}
	k := attemptKey{job, attempt}
	a := pw.attempts[k]
	if a == nil {
		a = &attemptTimes{job: job, attempt: attempt, pods: map[string]bool{}, running: map[string]time.Time{}, gone: map[string]time.Time{}}
		pw.attempts[k] = a
	}
	a.pods[p.Name] = true
	if _, seen := a.running[p.Name]; !seen && p.Status.Phase == corev1.PodRunning {
		a.running[p.Name] = now
	}
	if a.marked.IsZero() && p.Annotations[kubeb.AnnotationStopReason] != "" {
		a.marked, a.preempted = now, p.Annotations[kubeb.AnnotationPreemptor] != ""
	}
	if deleted {
		a.gone[p.Name] = now
	}
}

// timeRunning records grant → all pods Running for the attempts whose pods
// all run now; it asks the job for its grant time, so trainq-worker must
// still run (waitRunning calls it).
func (pw *podWatch) timeRunning() {
	pw.mu.Lock()
	var ready []*attemptTimes
	for _, a := range pw.attempts {
		if !a.timed && len(a.running) == len(a.pods) {
			a.timed = true
			ready = append(ready, a)
		}
	}
	pw.mu.Unlock()
	for _, a := range ready {
		if at, workers := grantTime(a.job, a.attempt); at != nil && workers == len(a.running) {
			record(&figures.grantToRunning, latest(a.running).Sub(*at))
		}
	}
}

// collect adds the preemptions this watch saw end to figures.
func (pw *podWatch) collect() {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	for _, a := range pw.attempts {
		if a.preempted && len(a.gone) == len(a.pods) {
			record(&figures.preemptToGone, latest(a.gone).Sub(a.marked))
		}
	}
}

func latest(m map[string]time.Time) time.Time {
	var out time.Time
	for _, t := range m {
		if t.After(out) {
			out = t
		}
	}
	return out
}

func record(list *[]time.Duration, d time.Duration) {
	figures.mu.Lock()
	*list = append(*list, d)
	figures.mu.Unlock()
}

// grantTime is when an attempt was granted (its StartedAt, which the job
// sets as the grant arrives) and its number of workers, from the job's status.
func grantTime(job string, attempt int) (*time.Time, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := trainq.New(env.client, nil).Status(ctx, job)
	if err != nil {
		return nil, 0
	}
	for _, a := range st.Attempts {
		if a.Number == attempt {
			return a.StartedAt, len(a.Placement)
		}
	}
	return nil, 0
}

// figureReport is the p50 (and count, min, max) of each figure of the run.
func figureReport() string {
	figures.mu.Lock()
	defer figures.mu.Unlock()
	line := func(name string, ds []time.Duration) string {
		if len(ds) == 0 {
			return fmt.Sprintf("FIGURES %s: no sample\n", name)
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		return fmt.Sprintf("FIGURES %s: p50 %v over %d (min %v, max %v)\n", name,
			s[len(s)/2].Round(time.Millisecond), len(s), s[0].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
	}
	return line("grant → all pods Running", figures.grantToRunning) + line("preemption → last pod gone", figures.preemptToGone)
}

// TestKubeRepeatedPreemption preempts a two-pod job five times, so that the
// run's figures have a p50 of preemption → last pod gone over gangs: every
// round, both of the victim's pods are marked with the preemptor and gone
// before a pod of the preemptor exists.
func TestKubeRepeatedPreemption(t *testing.T) {
	pw := watchPods(t)
	startWorker(t)
	for round := range 5 {
		victim := submit(t, fixture.Job{Region: "K", Allocation: "basic", Class: "low", Workers: 2, Script: "python3 train.py"}.Spec())
		v0, v1 := podName(victim, 1, 0), podName(victim, 1, 1)
		pw.waitRunning(t, v0, v1)
		waitState(t, victim, protocol.StateRunning, long)
		preemptor := submit(t, fixture.Job{Region: "K", Allocation: "basic", Class: "high", Workers: 2, Script: "python3 train.py", Env: map[string]string{"KWOK_EXIT_AFTER": "1s"}}.Spec())
		pw.waitGone(t, v0, v1)
		pw.mu.Lock()
		for _, v := range []string{v0, v1} {
			assert.Equal(t, preemptor, pw.last[v].Annotations[kubeb.AnnotationPreemptor], "round %d: %s names its preemptor", round, v)
		}
		assert.Nil(t, pw.pods[podName(preemptor, 1, 0)], "round %d: the preemptor waits for the victim's pods to be gone", round)
		pw.mu.Unlock()
		pw.waitRunning(t, podName(preemptor, 1, 0), podName(preemptor, 1, 1))
		waitState(t, preemptor, protocol.StateCompleted, long)
		waitState(t, victim, protocol.StatePreempted, long)
	}
}
