// Package kube is the Kubernetes cluster backend: every worker of a job is
// a pod, bound by trainq (the scheduler) to its granted node with nodeName
// and requesting its GPUs as nvidia.com/gpu, and each job has one headless
// Service that gives its pods stable DNS names for the rendezvous.
//
// Pods are named <job>-a<attempt>-w<worker> and labelled
// app.kubernetes.io/managed-by=trainq, trainq.io/job, trainq.io/attempt,
// trainq.io/worker and trainq.io/priority-class; they are owned by the
// job's Service, so deleting the Service cleans up. Everything the backend
// knows about a worker is its pod: a restarted trainq-worker finds the pods
// by name and label and re-attaches, and never creates a second one.
//
// The backend watches the pods of its namespace and the nodes through one
// shared informer each (list once, then the API's watch), so waiting for a
// worker, listing a node's live workers and answering Status cost no API
// call per pod.
package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/trainq/trainq/cluster"
)

// Options configures the Kubernetes backend.
type Options struct {
	// Client talks to the API server. Required.
	Client kubernetes.Interface
	// Namespace holds the pods and Services of every job. Required.
	Namespace string
	// ImagePullSecrets are given to every pod.
	ImagePullSecrets []string
	// TerminationGracePeriod is the pods' terminationGracePeriodSeconds:
	// the grace of a deletion that names none (kubectl delete, a drain).
	// trainq's own stops use the allocation's stop_grace_period. Default 30s.
	TerminationGracePeriod time.Duration
	// DefaultImage runs jobs that name no base_image.
	DefaultImage string
	// ServiceAccount runs the pods ("" = the namespace's default).
	ServiceAccount string
	// Python runs the scripts of Python job types. Default "python3".
	Python string
	// ImagePullTimeout is how long a pod may fail to pull its image (or to
	// create its container) before its attempt fails. Default 2m.
	ImagePullTimeout time.Duration
	// UnknownTimeout is how long a pod may stay in phase Unknown (its node's
	// kubelet no longer reports on it) before Wait gives its attempt up as
	// a node loss (cluster.ErrNodeLost). Default 1m.
	UnknownTimeout time.Duration
	// HeartbeatInterval is how often Wait calls its heartbeat. Default 2s.
	HeartbeatInterval time.Duration
	// Jobs tells the priority class, instance type and stop reason of a
	// job (optional).
	Jobs Jobs
	// Logger gets the backend's warnings (default slog.Default()).
	Logger *slog.Logger
	// KeepFinished is how long the Service and pods of a job that ended are
	// kept (for their logs and events) before they are deleted; 0 keeps
	// them. Needs Jobs.
	KeepFinished time.Duration
	// TerminatingTimeout is how long Stop waits, after every container of
	// a deleted pod has ended, for the pod object to be removed before it
	// reports the worker stopped anyway (see Stop). A kubelet removes such
	// a pod within a second or two; one held longer has a finalizer nobody
	// removes or a volume that does not unmount. Default 15s.
	TerminatingTimeout time.Duration
	// BeforeCreate, if set, runs in a start between its check of the pod
	// cache and its create: tests race another agent's start there.
	BeforeCreate func()
}

// Backend is the Kubernetes backend. It is safe for concurrent use.
type Backend struct {
	opts  Options
	pods  cache.SharedIndexInformer
	nodes cache.SharedIndexInformer
	stop  chan struct{}

	mu       sync.Mutex
	podSubs  map[string]map[chan struct{}]bool // pod name -> waiters
	nodeSubs map[chan struct{}]bool
	gone     map[string]goneRecord // pods deleted while this process watched, by name
	stuck    map[types.UID]bool    // pods reported stuck Terminating, until they are removed
	// startLocks serializes this process's starts on each node (by node
	// name, a *sync.Mutex each): see gpusFree.
	startLocks sync.Map
}

type goneRecord struct {
	pod *corev1.Pod // the last state seen
	at  time.Time
}

var (
	_ cluster.Backend     = (*Backend)(nil)
	_ cluster.Lister      = (*Backend)(nil)
	_ cluster.Inventory   = (*Backend)(nil)
	_ cluster.OutputClock = (*Backend)(nil)
)

const nodeIndex = "node"

// goneTTL is how long the last state of a deleted pod is remembered.
const goneTTL = 10 * time.Minute

// New starts watching the namespace's trainq pods and the cluster's nodes
// and returns once both are listed, or ctx is done. Close stops watching.
func New(ctx context.Context, opts Options) (*Backend, error) {
	if opts.Client == nil {
		return nil, errors.New("kubernetes backend: a client is required")
	}
	if opts.Namespace == "" {
		return nil, errors.New("kubernetes backend: kubernetes.namespace must not be empty")
	}
	if opts.TerminationGracePeriod <= 0 {
		opts.TerminationGracePeriod = 30 * time.Second
	}
	if opts.Python == "" {
		opts.Python = "python3"
	}
	if opts.ImagePullTimeout <= 0 {
		opts.ImagePullTimeout = 2 * time.Minute
	}
	if opts.UnknownTimeout <= 0 {
		opts.UnknownTimeout = time.Minute
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 2 * time.Second
	}
	if opts.TerminatingTimeout <= 0 {
		opts.TerminatingTimeout = 15 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	b := &Backend{
		opts: opts, stop: make(chan struct{}),
		podSubs: map[string]map[chan struct{}]bool{}, nodeSubs: map[chan struct{}]bool{}, gone: map[string]goneRecord{},
		stuck: map[types.UID]bool{},
	}
	selector := labels.Set{LabelManagedBy: ManagedBy}.String()
	pf := informers.NewSharedInformerFactoryWithOptions(opts.Client, 0, informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	b.pods = pf.Core().V1().Pods().Informer()
	if err := b.pods.AddIndexers(cache.Indexers{nodeIndex: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	if _, err := b.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { b.podChanged(obj, false) },
		UpdateFunc: func(_, obj any) { b.podChanged(obj, false) },
		DeleteFunc: func(obj any) { b.podChanged(obj, true) },
	}); err != nil {
		return nil, err
	}
	nf := informers.NewSharedInformerFactory(opts.Client, 0)
	b.nodes = nf.Core().V1().Nodes().Informer()
	if _, err := b.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { b.nodeChanged() },
		UpdateFunc: func(any, any) { b.nodeChanged() },
		DeleteFunc: func(any) { b.nodeChanged() },
	}); err != nil {
		return nil, err
	}
	go b.pods.Run(b.stop)
	go b.nodes.Run(b.stop)
	if !cache.WaitForCacheSync(ctx.Done(), b.pods.HasSynced, b.nodes.HasSynced) {
		close(b.stop)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("kubernetes backend: list pods in namespace %s and nodes: %w", opts.Namespace, err)
		}
		return nil, fmt.Errorf("kubernetes backend: could not list pods in namespace %s and nodes", opts.Namespace)
	}
	if opts.KeepFinished > 0 && opts.Jobs != nil {
		go b.collectLoop(min(opts.KeepFinished/4, 10*time.Minute))
	}
	return b, nil
}

func (b *Backend) collectLoop(every time.Duration) {
	t := time.NewTicker(max(every, time.Second))
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if n, err := b.CollectFinished(ctx, time.Now()); err != nil {
			b.opts.Logger.Warn("cannot clean up the Services of ended jobs", "error", err)
		} else if n > 0 {
			b.opts.Logger.Info("deleted the Services (and pods) of ended jobs", "jobs", n, "keep_finished", b.opts.KeepFinished)
		}
		cancel()
	}
}

// CollectFinished deletes the Service of every job that has ended (Jobs
// says so), has no pod left running, and whose last pod ended (or whose
// Service was made) more than KeepFinished before now; the pods it owns
// go with it (the garbage collector deletes them). It returns how many
// Services it deleted.
func (b *Backend) CollectFinished(ctx context.Context, now time.Time) (int, error) {
	if b.opts.Jobs == nil || b.opts.KeepFinished <= 0 {
		return 0, nil
	}
	svcs, err := b.opts.Client.CoreV1().Services(b.opts.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{LabelManagedBy: ManagedBy}.String()})
	if err != nil {
		return 0, err
	}
	objs, err := b.pods.GetIndexer().ByIndex(cache.NamespaceIndex, b.opts.Namespace)
	if err != nil {
		return 0, err
	}
	type use struct {
		live bool
		last time.Time
	}
	uses := map[string]*use{}
	for _, o := range objs {
		p := o.(*corev1.Pod)
		u := uses[p.Labels[LabelJob]]
		if u == nil {
			u = &use{}
			uses[p.Labels[LabelJob]] = u
		}
		st := StatusOf(cluster.WorkerID{}, p)
		if st.Phase != cluster.PhaseExited || p.DeletionTimestamp != nil {
			u.live = true
		} else if st.EndedAt.After(u.last) {
			u.last = st.EndedAt
		}
	}
	deleted := 0
	var errs []error
	for _, svc := range svcs.Items {
		job := svc.Annotations[AnnotationJobName]
		u := uses[svc.Labels[LabelJob]]
		last := svc.CreationTimestamp.Time
		if u != nil {
			if u.live {
				continue
			}
			last = u.last
		}
		if job == "" || now.Sub(last) < b.opts.KeepFinished {
			continue
		}
		ended, err := b.opts.Jobs.Ended(ctx, job)
		if err != nil {
			errs = append(errs, fmt.Errorf("job %s: %w", job, err))
			continue
		}
		if !ended {
			continue
		}
		bg := metav1.DeletePropagationBackground
		uid := svc.UID
		err = b.opts.Client.CoreV1().Services(b.opts.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{
			PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete service %s: %w", svc.Name, err))
			continue
		}
		deleted++
	}
	return deleted, errors.Join(errs...)
}

// Close stops the watches.
func (b *Backend) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
}

// Namespace is where the backend runs pods.
func (b *Backend) Namespace() string { return b.opts.Namespace }

func (b *Backend) podChanged(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if deleted {
		delete(b.stuck, pod.UID)
		b.gone[pod.Name] = goneRecord{pod: pod, at: time.Now()}
		for name, g := range b.gone {
			if time.Since(g.at) > goneTTL {
				delete(b.gone, name)
			}
		}
	} else if g, ok := b.gone[pod.Name]; ok && g.pod.UID != pod.UID {
		delete(b.gone, pod.Name)
	}
	for ch := range b.podSubs[pod.Name] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (b *Backend) nodeChanged() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.nodeSubs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// subscribe returns a channel that gets a value whenever the named pod changes.
func (b *Backend) subscribe(name string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	if b.podSubs[name] == nil {
		b.podSubs[name] = map[chan struct{}]bool{}
	}
	b.podSubs[name][ch] = true
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.podSubs[name], ch)
		if len(b.podSubs[name]) == 0 {
			delete(b.podSubs, name)
		}
		b.mu.Unlock()
	}
}

// NodeChanges returns a channel that gets a value whenever a node changes.
func (b *Backend) NodeChanges() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	b.nodeSubs[ch] = true
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.nodeSubs, ch)
		b.mu.Unlock()
	}
}

// NodeReady says whether the node exists and its Ready condition is True,
// and if not, why, as a sentence part ("is NotReady: kubelet stopped
// posting node status").
func (b *Backend) NodeReady(name string) (bool, string) {
	obj, ok, err := b.nodes.GetStore().GetByKey(name)
	if err != nil || !ok {
		return false, "does not exist in the cluster"
	}
	node := obj.(*corev1.Node)
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return true, ""
		}
		why := "is NotReady"
		if c.Status == corev1.ConditionUnknown {
			why = "has an Unknown Ready condition"
		}
		if c.Message != "" {
			why += ": " + c.Message
		}
		return false, why
	}
	return false, "has no Ready condition yet"
}

// Node returns a node as last seen, or nil.
func (b *Backend) Node(name string) *corev1.Node {
	obj, ok, err := b.nodes.GetStore().GetByKey(name)
	if err != nil || !ok {
		return nil
	}
	return obj.(*corev1.Node)
}

// lookup finds a worker's pod: in the informer's cache, else among the
// pods seen deleted (gone), else by asking the API (a pod just created may
// not be in the cache yet). Neither pod nor gone: there is no such pod.
func (b *Backend) lookup(ctx context.Context, name string) (pod *corev1.Pod, gone bool, err error) {
	obj, ok, err := b.pods.GetStore().GetByKey(b.opts.Namespace + "/" + name)
	if err != nil {
		return nil, false, err
	}
	if ok {
		return obj.(*corev1.Pod), false, nil
	}
	b.mu.Lock()
	g, wasGone := b.gone[name]
	b.mu.Unlock()
	if wasGone {
		return g.pod, true, nil
	}
	p, err := b.opts.Client.CoreV1().Pods(b.opts.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return p, false, nil
}

// placedWorker is the worker of a pod on node that has not ended, with the
// GPUs its annotation gives it.
func placedWorker(p *corev1.Pod, node string) (cluster.PlacedWorker, bool) {
	if p.Spec.NodeName != node || podEnded(p) {
		return cluster.PlacedWorker{}, false
	}
	id, ok := idOf(p)
	if !ok {
		return cluster.PlacedWorker{}, false
	}
	var gpus []int
	for _, g := range strings.Split(p.Annotations[AnnotationGPUs], ",") {
		if n, err := strconv.Atoi(g); err == nil {
			gpus = append(gpus, n)
		}
	}
	return cluster.PlacedWorker{WorkerStatus: StatusOf(id, p), Node: node, GPUs: gpus}, true
}

// idOf reads the worker a pod belongs to from its labels and annotations.
func idOf(p *corev1.Pod) (cluster.WorkerID, bool) {
	job := p.Annotations[AnnotationJobName]
	attempt, err1 := strconv.Atoi(p.Labels[LabelAttempt])
	worker, err2 := strconv.Atoi(p.Labels[LabelWorker])
	if job == "" || err1 != nil || err2 != nil {
		return cluster.WorkerID{}, false
	}
	return cluster.WorkerID{Job: job, Attempt: attempt, Worker: worker}, true
}

// containerState is the worker container's status, if the kubelet has
// reported one.
func containerState(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == ContainerName {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// podEnded says whether no container of the pod runs any more: its phase is
// Succeeded or Failed, or the kubelet reports every container of its spec
// terminated (the containers of a deleted pod are killed before its phase
// turns terminal, and an older kubelet leaves it Running). The pods restart
// nothing (restartPolicy Never), so an ended pod holds no GPU.
func podEnded(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return true
	}
	if len(p.Spec.Containers) == 0 {
		return false
	}
	terminated := make(map[string]bool, len(p.Status.ContainerStatuses))
	for _, cs := range p.Status.ContainerStatuses {
		terminated[cs.Name] = cs.State.Terminated != nil
	}
	for _, c := range p.Spec.Containers {
		if !terminated[c.Name] {
			return false
		}
	}
	for _, cs := range p.Status.InitContainerStatuses {
		if cs.State.Running != nil { // a sidecar
			return false
		}
	}
	return true
}

// StatusOf is a worker's status as its pod tells it. A pod that ended (see
// podEnded) is exited with its container's exit code (1 if the pod failed
// before its container ran); any other pod, also one being deleted, still
// holds its node's resources and is running.
func StatusOf(id cluster.WorkerID, p *corev1.Pod) cluster.WorkerStatus {
	st := cluster.WorkerStatus{ID: id, Phase: cluster.PhaseRunning, LogPath: "pod/" + p.Namespace + "/" + p.Name, URL: p.Annotations[AnnotationURL]}
	_, st.StopRequested = p.Annotations[AnnotationStopReason]
	st.StartedAt = p.CreationTimestamp.Time
	if p.Status.StartTime != nil {
		st.StartedAt = p.Status.StartTime.Time
	}
	cs := containerState(p)
	if cs != nil && cs.State.Running != nil {
		st.StartedAt = cs.State.Running.StartedAt.Time
	}
	if podEnded(p) {
		st.Phase = cluster.PhaseExited
		if p.Status.Phase == corev1.PodFailed {
			st.ExitCode, st.Reason = 1, p.Status.Reason // Evicted, OutOfmemory, ...
		}
		if cs != nil && cs.State.Terminated != nil {
			t := cs.State.Terminated
			st.Reason = terminationReason(t)
			st.ExitCode = int(t.ExitCode)
			st.EndedAt = t.FinishedAt.Time
			if !t.StartedAt.IsZero() {
				st.StartedAt = t.StartedAt.Time
			}
		}
		if st.EndedAt.IsZero() {
			st.EndedAt = time.Now().UTC()
		}
		st.Signaled = st.StopRequested || st.ExitCode > 128
	}
	return st
}

// terminationReason is why the kubelet says a container ended, when that
// says more than its exit code: OOMKilled, ContainerCannotRun,
// DeadlineExceeded... but not the plain Completed or Error.
func terminationReason(t *corev1.ContainerStateTerminated) string {
	switch t.Reason {
	case "", "Completed", "Error":
		return ""
	}
	if t.Message != "" {
		return t.Reason + ": " + t.Message
	}
	return t.Reason
}

// goneStatus is the status of a pod that was deleted: it exited, with its
// container's exit code if the kubelet reported one, else as killed (137).
func goneStatus(id cluster.WorkerID, p *corev1.Pod) cluster.WorkerStatus {
	st := StatusOf(id, p)
	if st.Phase != cluster.PhaseExited {
		st.Phase, st.ExitCode, st.EndedAt = cluster.PhaseExited, 137, time.Now().UTC()
		if cs := containerState(p); cs != nil && cs.State.Terminated != nil {
			st.ExitCode, st.EndedAt = int(cs.State.Terminated.ExitCode), cs.State.Terminated.FinishedAt.Time
			st.Reason = terminationReason(cs.State.Terminated)
		}
	}
	st.Signaled = true
	return st
}

// Error types of the failures Wait reports for a pod that cannot run.
const (
	// ErrTypePodNotStarted: the pod's container could not be created (its
	// image cannot be pulled, its config is wrong) or the node refused the
	// pod. Not retryable: the attempt fails with the reason.
	ErrTypePodNotStarted = "PodNotStarted"
)

// startFailure says why a pod's container cannot start, if it cannot:
// the waiting reason and message of an image that cannot be pulled or a
// container that cannot be created, and whether to fail at once (the image
// name is invalid) rather than after ImagePullTimeout.
func startFailure(p *corev1.Pod) (reason string, immediate bool) {
	if p.Status.Phase == corev1.PodFailed {
		if cs := containerState(p); cs == nil || cs.State.Terminated == nil {
			why := p.Status.Reason
			if p.Status.Message != "" {
				why += ": " + p.Status.Message
			}
			if why == "" {
				why = "the pod failed before its container ran"
			}
			return why, true
		}
		return "", false
	}
	cs := containerState(p)
	if cs == nil || cs.State.Waiting == nil {
		return "", false
	}
	w := cs.State.Waiting
	why := w.Reason
	if w.Message != "" {
		why += ": " + w.Message
	}
	switch w.Reason {
	case "InvalidImageName", "ErrImageNeverPull":
		return why, true
	case "ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
		return why, false
	}
	return "", false
}

// Rendezvous is worker 0's pod, through the job's headless Service, on
// port 29500. It depends only on the job and attempt.
func (b *Backend) Rendezvous(ctx context.Context, job string, attempt int) (string, int, error) {
	if err := cluster.ValidJobName(job); err != nil {
		return "", 0, err
	}
	if attempt < 0 {
		return "", 0, fmt.Errorf("attempt: must be >= 0, got %d", attempt)
	}
	return MasterAddr(job, attempt), MasterPort, nil
}

func (b *Backend) meta(ctx context.Context, job string) JobMeta {
	if b.opts.Jobs == nil {
		return JobMeta{}
	}
	m, err := b.opts.Jobs.Meta(ctx, job)
	if err != nil {
		b.opts.Logger.Warn("cannot tell the job's priority class and instance type; its pods get neither label nor CPU and memory requests",
			"job", job, "error", err)
	}
	return m
}

// ensureService creates the job's headless Service, or returns it.
func (b *Backend) ensureService(ctx context.Context, job string, notebook bool) (*corev1.Service, error) {
	svcs := b.opts.Client.CoreV1().Services(b.opts.Namespace)
	want := b.Service(job, notebook)
	svc, err := svcs.Create(ctx, want, metav1.CreateOptions{FieldManager: "trainq"})
	if apierrors.IsAlreadyExists(err) {
		svc, err = svcs.Get(ctx, want.Name, metav1.GetOptions{})
		if err == nil && svc.Annotations[AnnotationJobName] != job {
			return nil, fmt.Errorf("service %s/%s belongs to job %q, not %q", b.opts.Namespace, want.Name, svc.Annotations[AnnotationJobName], job)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("create the job's service %s/%s: %w", b.opts.Namespace, want.Name, err)
	}
	return svc, nil
}

// Start creates the worker's pod, bound to spec.Node, unless it exists: a
// retried or repeated Start (after a trainq-worker restart) finds the pod
// and returns its status. The job's headless Service is created first and
// owns the pod.
func (b *Backend) Start(ctx context.Context, spec cluster.WorkerSpec) (cluster.WorkerStatus, error) {
	if err := spec.Validate(); err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, err
	}
	if spec.Node == "" {
		return cluster.WorkerStatus{ID: spec.ID}, errors.New("node: must not be empty")
	}
	name := PodName(spec.ID)
	if p, gone, err := b.lookup(ctx, name); err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, err
	} else if p != nil && !gone {
		// A start tried again may have created the pod and then failed to
		// confirm its GPUs: confirm them now.
		if err := b.confirmGPUs(ctx, spec, p); err != nil {
			return cluster.WorkerStatus{ID: spec.ID}, err
		}
		return StatusOf(spec.ID, p), nil
	}
	if spec.MasterAddr == "" || spec.MasterPort == 0 {
		spec.MasterAddr, spec.MasterPort, _ = b.Rendezvous(ctx, spec.ID.Job, spec.ID.Attempt)
	}
	meta := b.meta(ctx, spec.ID.Job)
	meta.Notebook = meta.Notebook || spec.Notebook
	spec.Notebook = meta.Notebook
	svc, err := b.ensureService(ctx, spec.ID.Job, meta.Notebook)
	if err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, err
	}
	pod := b.Pod(spec, meta, svc)
	if pod.Spec.Containers[0].Image == "" {
		return cluster.WorkerStatus{ID: spec.ID}, errors.New("base_image: the job names no image and the config has no kubernetes.default_image")
	}
	unlock := b.lockStarts(spec.Node)
	defer unlock()
	if err := b.gpusFree(ctx, spec); err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, err
	}
	cached, unsubscribe := b.subscribe(name) // before the create: its event must not be missed
	defer unsubscribe()
	if b.opts.BeforeCreate != nil {
		b.opts.BeforeCreate()
	}
	created, err := b.opts.Client.CoreV1().Pods(b.opts.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: "trainq"})
	if apierrors.IsAlreadyExists(err) {
		created, err = b.opts.Client.CoreV1().Pods(b.opts.Namespace).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, fmt.Errorf("create pod %s/%s on node %s: %w", b.opts.Namespace, name, spec.Node, err)
	}
	if err := b.confirmGPUs(ctx, spec, created); err != nil {
		return cluster.WorkerStatus{ID: spec.ID}, err
	}
	b.awaitCached(ctx, name, cached)
	return StatusOf(spec.ID, created), nil
}

// lockStarts takes this process's lock of the starts on node.
func (b *Backend) lockStarts(node string) (unlock func()) {
	m, _ := b.startLocks.LoadOrStore(node, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// gpusFree refuses (cluster.GPUsBusy) a start whose GPUs a live pod of
// another job or attempt on the node uses, whatever the allocator decided.
// It reads the pod cache, before anything is created: starts by this process
// are serialized per node and each waits until the cache has its pod
// (awaitCached), so they see each other. A pod another trainq-worker created
// within the cache's lag can be missed here; confirmGPUs, after the create,
// does not miss it.
func (b *Backend) gpusFree(ctx context.Context, spec cluster.WorkerSpec) error {
	if len(spec.GPUs) == 0 {
		return nil
	}
	live, err := b.LiveWorkers(ctx, spec.Node)
	if err != nil {
		return err
	}
	return busyWith(spec, live)
}

// confirmGPUs is the authoritative check of a start, made once its pod is
// created: a consistent read of the node's pods from the API server, not the
// cache. A live pod of another worker on one of the start's GPUs (created by
// another agent, a stale one during a partition, or missed by a lagging
// cache) makes the start yield: its pod is deleted and the start refused
// (GPUsBusy). Of two starts that race, the one that lists second sees the
// other's pod, so at most one keeps its pod (both may yield: the allocator
// fences the node and tries again). A start that cannot list yields too.
func (b *Backend) confirmGPUs(ctx context.Context, spec cluster.WorkerSpec, created *corev1.Pod) error {
	if len(spec.GPUs) == 0 {
		return nil
	}
	// Not older than the pod itself: every pod created before it is in the
	// answer (and one created after it sees it in its own), and the API
	// server may answer from its watch cache instead of a quorum read.
	list, err := b.opts.Client.CoreV1().Pods(b.opts.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector:        labels.Set{LabelManagedBy: ManagedBy}.String(),
		FieldSelector:        fields.OneTermEqualSelector("spec.nodeName", spec.Node).String(),
		ResourceVersion:      created.ResourceVersion,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	var refusal error
	if err != nil {
		refusal = fmt.Errorf("confirm GPUs %v on node %s: %w", spec.GPUs, spec.Node, err)
	} else {
		var live []cluster.PlacedWorker
		for i := range list.Items {
			p := &list.Items[i]
			// A pod created after this one and already being deleted is a
			// start that yielded to it: this one keeps its GPUs (a start
			// tried again must not end a worker that runs for nothing).
			if p.DeletionTimestamp != nil && created.CreationTimestamp.Before(&p.CreationTimestamp) {
				continue
			}
			if w, ok := placedWorker(p, spec.Node); ok {
				live = append(live, w)
			}
		}
		refusal = busyWith(spec, live)
	}
	if refusal == nil {
		return nil
	}
	// The deletion must not end with the start's context: a pod left behind
	// would be found by the start tried again, which confirms it anew.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	secs, uid := int64(1), created.UID // 0 would force the deletion while a container may start
	err = b.opts.Client.CoreV1().Pods(b.opts.Namespace).Delete(dctx, created.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &secs, Preconditions: &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		b.opts.Logger.Warn("a start that yielded its GPUs could not delete its pod; its next start or a fence will", "pod", created.Name, "error", err)
	}
	return refusal
}

// busyWith refuses (cluster.GPUsBusy) spec's start if one of live, another
// worker, uses one of its GPUs.
func busyWith(spec cluster.WorkerSpec, live []cluster.PlacedWorker) error {
	busy := &cluster.GPUsBusy{Node: spec.Node}
	for _, w := range live {
		if w.ID == spec.ID {
			continue
		}
		for _, g := range w.GPUs {
			if slices.Contains(spec.GPUs, g) && !slices.Contains(busy.GPUs, g) {
				busy.GPUs, busy.Holder = append(busy.GPUs, g), w.ID
			}
		}
	}
	if len(busy.GPUs) == 0 {
		return nil
	}
	slices.Sort(busy.GPUs)
	return busy
}

// awaitCached waits, briefly, until the pod cache has the pod just created
// (changed gets a value when the cache takes an event of it).
func (b *Backend) awaitCached(ctx context.Context, name string, changed <-chan struct{}) {
	key := b.opts.Namespace + "/" + name
	timeout := time.NewTimer(2 * time.Second)
	defer timeout.Stop()
	for {
		if _, ok, _ := b.pods.GetStore().GetByKey(key); ok {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// Status returns the worker's status from its pod.
func (b *Backend) Status(ctx context.Context, id cluster.WorkerID) (cluster.WorkerStatus, error) {
	if err := id.Validate(); err != nil {
		return cluster.WorkerStatus{ID: id}, err
	}
	st, _, _, err := b.podStatus(ctx, id, PodName(id))
	return st, err
}

// podStatus looks the worker's pod up. settled is true when there is no live
// pod to act on: an error, no pod, or a pod already on its way out.
func (b *Backend) podStatus(ctx context.Context, id cluster.WorkerID, name string) (st cluster.WorkerStatus, p *corev1.Pod, settled bool, err error) {
	p, gone, err := b.lookup(ctx, name)
	switch {
	case err != nil:
		return cluster.WorkerStatus{ID: id}, nil, true, err
	case p == nil:
		return cluster.WorkerStatus{ID: id, Phase: cluster.PhaseNotFound}, nil, true, nil
	case gone:
		return goneStatus(id, p), p, true, nil
	}
	return StatusOf(id, p), p, false, nil
}

// Wait follows the worker's pod through the pod watch until it ends,
// calling heartbeat every HeartbeatInterval while it runs. A pod deleted
// meanwhile ends as killed (137). A pod whose container cannot start (an
// image that cannot be pulled for ImagePullTimeout, an invalid image name,
// a pod the node refused) fails with a non-retryable ErrTypePodNotStarted
// error naming the reason, so that the attempt fails instead of hanging.
func (b *Backend) Wait(ctx context.Context, id cluster.WorkerID, heartbeat func(cluster.WorkerStatus)) (cluster.WorkerStatus, error) {
	if err := id.Validate(); err != nil {
		return cluster.WorkerStatus{ID: id}, err
	}
	name := PodName(id)
	changed, unsubscribe := b.subscribe(name)
	defer unsubscribe()
	tick := time.NewTicker(b.opts.HeartbeatInterval)
	defer tick.Stop()
	trouble := podTrouble{b: b, id: id}
	for {
		p, gone, err := b.lookup(ctx, name)
		switch {
		case err != nil:
			return cluster.WorkerStatus{ID: id}, err
		case p == nil:
			return cluster.WorkerStatus{ID: id, Phase: cluster.PhaseNotFound}, fmt.Errorf("%w: %s (no pod %s/%s)", cluster.ErrNotFound, id, b.opts.Namespace, name)
		case gone:
			return goneStatus(id, p), nil
		}
		st := StatusOf(id, p)
		if err := trouble.check(p); err != nil {
			return st, err
		}
		if st.Phase == cluster.PhaseExited {
			return st, nil
		}
		if heartbeat != nil {
			heartbeat(st)
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-changed:
		case <-tick.C:
		}
	}
}

// podTrouble tells, over the successive states of a watched pod, when it
// can no longer be waited for: its container cannot start, or its node has
// lost track of it.
type podTrouble struct {
	b                          *Backend
	id                         cluster.WorkerID
	failingSince, unknownSince time.Time
}

// check returns the error that ends the watch of p, or nil to go on.
func (t *podTrouble) check(p *corev1.Pod) error {
	if p.DeletionTimestamp != nil {
		t.failingSince, t.unknownSince = time.Time{}, time.Time{}
		return nil
	}
	if why, immediate := startFailure(p); why == "" {
		t.failingSince = time.Time{}
	} else {
		if t.failingSince.IsZero() {
			t.failingSince = time.Now()
		}
		if immediate || time.Since(t.failingSince) >= t.b.opts.ImagePullTimeout {
			msg := fmt.Sprintf("worker %d could not start: pod %s on node %s: %s", t.id.Worker, p.Name, p.Spec.NodeName, why)
			return temporal.NewNonRetryableApplicationError(msg, ErrTypePodNotStarted, nil)
		}
	}
	if p.Status.Phase != corev1.PodUnknown {
		t.unknownSince = time.Time{}
		return nil
	}
	if t.unknownSince.IsZero() {
		t.unknownSince = time.Now()
	}
	if time.Since(t.unknownSince) < t.b.opts.UnknownTimeout {
		return nil
	}
	return fmt.Errorf("%w: pod %s has been in phase Unknown on node %s for %s (%s)",
		cluster.ErrNodeLost, p.Name, p.Spec.NodeName, t.b.opts.UnknownTimeout, p.Status.Reason)
}

// stopReason asks Jobs why the worker's attempt ends.
func (b *Backend) stopReason(ctx context.Context, id cluster.WorkerID) (reason, preemptor string) {
	reason = "stopped by trainq"
	if b.opts.Jobs == nil {
		return reason, ""
	}
	r, p, err := b.opts.Jobs.StopReason(ctx, id)
	if err != nil {
		b.opts.Logger.Warn("cannot tell why the worker is stopped", "worker", id.String(), "error", err)
		return reason, ""
	}
	if r != "" {
		reason = r
	}
	return reason, p
}

// markStopping records on the pod why it is stopped before it is deleted,
// as Kueue marks the pods it evicts: the trainq.io/stop-reason and
// trainq.io/preemptor annotations, a DisruptionTarget condition and an
// Event (reason Preempted or Stopped) naming the preemptor.
func (b *Backend) markStopping(ctx context.Context, p *corev1.Pod, id cluster.WorkerID) {
	reason, preemptor := b.stopReason(ctx, id)
	now := metav1.Now()
	ann := map[string]any{AnnotationStopReason: reason, AnnotationStoppedAt: now.UTC().Format(time.RFC3339)}
	if preemptor != "" {
		ann[AnnotationPreemptor] = preemptor
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	pods := b.opts.Client.CoreV1().Pods(b.opts.Namespace)
	if _, err := pods.Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "trainq"}); err != nil && !apierrors.IsNotFound(err) {
		b.opts.Logger.Warn("cannot annotate the pod with why it stops", "pod", p.Name, "error", err)
	}
	evReason, condReason := "Stopped", "DeletionByTrainq"
	if preemptor != "" {
		evReason, condReason = "Preempted", "PreemptionByTrainq"
	}
	cond, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{
		"type": "DisruptionTarget", "status": "True", "reason": condReason, "message": reason, "lastTransitionTime": now.UTC().Format(time.RFC3339),
	}}}})
	if _, err := pods.Patch(ctx, p.Name, types.StrategicMergePatchType, cond, metav1.PatchOptions{FieldManager: "trainq"}, "status"); err != nil && !apierrors.IsNotFound(err) {
		b.opts.Logger.Warn("cannot set the pod's DisruptionTarget condition", "pod", p.Name, "error", err)
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: p.Name + ".", Namespace: b.opts.Namespace},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID,
		},
		Reason: evReason, Message: reason, Type: corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "trainq"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := b.opts.Client.CoreV1().Events(b.opts.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		b.opts.Logger.Warn("cannot record an event for the stopped pod", "pod", p.Name, "error", err)
	}
}

// Stop marks the worker's pod with why it stops (see markStopping) and
// deletes it with grace as its grace period (SIGTERM, then SIGKILL after
// grace), then waits, through the pod watch, until the pod is gone, or until
// all its containers have ended and the pod has still not been removed
// TerminatingTimeout later: a finalizer nobody removes, or a kubelet that
// cannot unmount a volume, keeps a pod Terminating for ever although its
// worker's processes are gone. Such a pod gets a StuckTerminating event
// naming what holds it (see reportStuck) and the worker is stopped with its
// container's exit status. Either way the node's GPUs are free when Stop
// returns. A pod is never force-deleted and its finalizers are left alone:
// on a node whose kubelet is gone, nothing says the containers ended, and
// Stop waits until ctx is done. A worker that exited (its pod is kept for
// its logs) or was never started returns at once.
func (b *Backend) Stop(ctx context.Context, id cluster.WorkerID, grace time.Duration) (cluster.WorkerStatus, error) {
	if err := id.Validate(); err != nil {
		return cluster.WorkerStatus{ID: id}, err
	}
	name := PodName(id)
	changed, unsubscribe := b.subscribe(name)
	defer unsubscribe()
	st, p, settled, err := b.podStatus(ctx, id, name)
	if settled {
		return st, err
	}
	if st.Phase == cluster.PhaseExited && p.DeletionTimestamp == nil {
		return st, nil
	}
	if p.DeletionTimestamp == nil {
		b.markStopping(ctx, p, id)
		secs := max(int64(grace.Round(time.Second)/time.Second), 1) // 0 would force the deletion
		uid := p.UID
		err := b.opts.Client.CoreV1().Pods(b.opts.Namespace).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: &secs, Preconditions: &metav1.Preconditions{UID: &uid},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return st, fmt.Errorf("delete pod %s/%s: %w", b.opts.Namespace, name, err)
		}
	}
	stopped := func(last *corev1.Pod) (cluster.WorkerStatus, error) {
		st := goneStatus(id, last)
		st.StopRequested = true
		return st, nil
	}
	poll := time.NewTicker(5 * time.Second) // also ask the API, in case the watch lags
	defer poll.Stop()
	var removalDue <-chan time.Time // set once the pod's containers have all ended
	last := p
	for {
		if removalDue == nil && podEnded(last) {
			removal := time.NewTimer(b.removalWait(last, time.Now()))
			defer removal.Stop()
			removalDue = removal.C
		}
		select {
		case <-ctx.Done():
			return StatusOf(id, last), ctx.Err()
		case <-changed:
		case <-poll.C:
			if _, err := b.opts.Client.CoreV1().Pods(b.opts.Namespace).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return stopped(last)
			}
		case <-removalDue:
			b.reportStuck(ctx, last)
			return stopped(last)
		}
		p, gone, err := b.lookup(ctx, name)
		if err != nil {
			return StatusOf(id, last), err
		}
		if p == nil || gone || p.UID != last.UID {
			if p != nil && gone {
				last = p
			}
			return stopped(last)
		}
		last = p
	}
}

// removalWait is how much longer Stop waits for an ended pod to be removed:
// until TerminatingTimeout after its last container ended, by the kubelet's
// clock, and never longer than TerminatingTimeout from now, so that a Stop
// repeated long after (a fence, a retried activity) returns at once.
func (b *Backend) removalWait(p *corev1.Pod, now time.Time) time.Duration {
	var ended time.Time
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.FinishedAt.After(ended) {
			ended = t.FinishedAt.Time
		}
	}
	limit := b.opts.TerminatingTimeout
	if ended.IsZero() {
		return limit
	}
	return min(max(ended.Add(limit).Sub(now), 0), limit)
}

// Event reason of a pod that stays Terminating after its containers ended.
const EventStuckTerminating = "StuckTerminating"

// reportStuck tells the platform team, once per pod while this process
// runs, that the pod of a stopped worker outlives its containers: a
// Warning event on the pod and a log line, naming its finalizers, or, with
// none, its kubelet.
func (b *Backend) reportStuck(ctx context.Context, p *corev1.Pod) {
	b.mu.Lock()
	seen := b.stuck[p.UID]
	b.stuck[p.UID] = true
	b.mu.Unlock()
	if seen {
		return
	}
	holder := "finalizers " + strings.Join(p.Finalizers, ", ")
	if len(p.Finalizers) == 0 {
		holder = "no finalizer: the kubelet of node " + p.Spec.NodeName + " has not removed it (a volume that does not unmount?)"
	}
	msg := fmt.Sprintf("pod stuck Terminating: all its containers ended but it was not removed within %s; held by %s. "+
		"trainq counts the worker as stopped and its GPUs as free; it neither removes finalizers nor force-deletes the pod",
		b.opts.TerminatingTimeout, holder)
	b.opts.Logger.Warn("pod stuck Terminating after its containers ended; the worker counts as stopped",
		"pod", p.Namespace+"/"+p.Name, "node", p.Spec.NodeName, "finalizers", p.Finalizers, "waited", b.opts.TerminatingTimeout)
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: p.Name + ".", Namespace: b.opts.Namespace},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID,
		},
		Reason: EventStuckTerminating, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "trainq", Host: p.Spec.NodeName},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := b.opts.Client.CoreV1().Events(b.opts.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		b.opts.Logger.Warn("cannot record an event for the pod stuck Terminating", "pod", p.Name, "error", err)
	}
}

// Logs copies the worker's container log, or its last tail lines, from the
// pod log API to w.
func (b *Backend) Logs(ctx context.Context, id cluster.WorkerID, tail int, w io.Writer) error {
	return b.StreamLogs(ctx, id, tail, false, w)
}

// StreamLogs is Logs, and with follow it goes on until the container ends
// or ctx is done.
func (b *Backend) StreamLogs(ctx context.Context, id cluster.WorkerID, tail int, follow bool, w io.Writer) error {
	if err := id.Validate(); err != nil {
		return err
	}
	opts := &corev1.PodLogOptions{Container: ContainerName, Follow: follow}
	if tail > 0 {
		n := int64(tail)
		opts.TailLines = &n
	}
	rc, err := b.opts.Client.CoreV1().Pods(b.opts.Namespace).GetLogs(PodName(id), opts).Stream(ctx)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %s (no pod %s/%s)", cluster.ErrNotFound, id, b.opts.Namespace, PodName(id))
	}
	if err != nil {
		return fmt.Errorf("logs of pod %s/%s: %w", b.opts.Namespace, PodName(id), err)
	}
	defer rc.Close()
	_, err = io.Copy(w, rc)
	return err
}

// ReadLog reads a chunk of the worker's container log from the pod log API
// (see cluster.LogReader). The API has no byte offsets: a read asks for the
// log's first Offset+MaxBytes(+1, to tell whether there is more) bytes and
// keeps the end, and a first read with Tail fetches the whole log to find
// where its last lines start. A pod whose container has not started yet
// has an empty log.
func (b *Backend) ReadLog(ctx context.Context, req cluster.LogRequest) (cluster.LogChunk, error) {
	if err := req.Validate(); err != nil {
		return cluster.LogChunk{}, err
	}
	opts := &corev1.PodLogOptions{Container: ContainerName}
	if req.Tail == 0 {
		limit := req.Offset + int64(req.Limit()) + 1
		opts.LimitBytes = &limit
	}
	raw, err := b.opts.Client.CoreV1().Pods(b.opts.Namespace).GetLogs(PodName(req.ID), opts).DoRaw(ctx)
	switch {
	case apierrors.IsNotFound(err):
		return cluster.LogChunk{}, fmt.Errorf("%w: %s (no pod %s/%s)", cluster.ErrNotFound, req.ID, b.opts.Namespace, PodName(req.ID))
	case apierrors.IsBadRequest(err): // "container ... is waiting to start"
		return cluster.LogChunk{Offset: req.Offset, Size: req.Offset}, nil
	case err != nil:
		return cluster.LogChunk{}, fmt.Errorf("logs of pod %s/%s: %w", b.opts.Namespace, PodName(req.ID), err)
	}
	return cluster.ReadChunk(bytes.NewReader(raw), int64(len(raw)), req)
}

// LastOutput is the time stamp the kubelet gave the container's last log
// line (the pod log API with timestamps and one line), or the zero time if
// it wrote none yet.
func (b *Backend) LastOutput(ctx context.Context, id cluster.WorkerID) (time.Time, error) {
	if err := id.Validate(); err != nil {
		return time.Time{}, err
	}
	one := int64(1)
	raw, err := b.opts.Client.CoreV1().Pods(b.opts.Namespace).GetLogs(PodName(id), &corev1.PodLogOptions{
		Container: ContainerName, TailLines: &one, Timestamps: true,
	}).DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return time.Time{}, fmt.Errorf("%w: %s", cluster.ErrNotFound, id)
	}
	if err != nil {
		return time.Time{}, err
	}
	return ParseLogTime(raw)
}

// ParseLogTime reads the RFC 3339 time stamp that starts a log line of the
// pod log API with timestamps=true; an empty log is the zero time.
func ParseLogTime(line []byte) (time.Time, error) {
	s := strings.TrimSpace(string(line))
	if s == "" {
		return time.Time{}, nil
	}
	stamp, _, _ := strings.Cut(s, " ")
	t, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		return time.Time{}, fmt.Errorf("log line without a time stamp: %q", s)
	}
	return t, nil
}

// List returns the workers of every attempt of job that have a pod,
// ordered by attempt then worker.
func (b *Backend) List(ctx context.Context, job string) ([]cluster.WorkerStatus, error) {
	if err := cluster.ValidJobName(job); err != nil {
		return nil, err
	}
	objs, err := b.pods.GetIndexer().ByIndex(cache.NamespaceIndex, b.opts.Namespace)
	if err != nil {
		return nil, err
	}
	var out []cluster.WorkerStatus
	base := JobBase(job)
	for _, o := range objs {
		p := o.(*corev1.Pod)
		if p.Labels[LabelJob] != base {
			continue
		}
		if id, ok := idOf(p); ok && id.Job == job {
			out = append(out, StatusOf(id, p))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ID.Attempt != out[j].ID.Attempt {
			return out[i].ID.Attempt < out[j].ID.Attempt
		}
		return out[i].ID.Worker < out[j].ID.Worker
	})
	return out, nil
}

// LiveWorkers returns the workers whose pods are bound to node and have not
// ended (see podEnded; also pods being deleted: their containers may still
// hold the GPUs, but not a pod stuck Terminating after they all ended), with
// the GPU indices trainq granted them, ordered by job, attempt and worker.
func (b *Backend) LiveWorkers(ctx context.Context, node string) ([]cluster.PlacedWorker, error) {
	if node == "" {
		return nil, errors.New("live workers: node must not be empty")
	}
	objs, err := b.pods.GetIndexer().ByIndex(nodeIndex, node)
	if err != nil {
		return nil, err
	}
	var out []cluster.PlacedWorker
	for _, o := range objs {
		if w, ok := placedWorker(o.(*corev1.Pod), node); ok {
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, c := out[i].ID, out[j].ID
		if a.Job != c.Job {
			return a.Job < c.Job
		}
		if a.Attempt != c.Attempt {
			return a.Attempt < c.Attempt
		}
		return a.Worker < c.Worker
	})
	return out, nil
}

// Notice sets the worker's pod's notice annotation, which its downward-API
// volume shows at NoticePath (see cluster.Noticer). The kubelet refreshes
// such volumes on its sync period, so a pod may read it some seconds later.
func (b *Backend) Notice(ctx context.Context, id cluster.WorkerID, notice []byte) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotationNotice: string(notice)}}})
	if err != nil {
		return err
	}
	_, err = b.opts.Client.CoreV1().Pods(b.opts.Namespace).Patch(ctx, PodName(id), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "trainq"})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %s", cluster.ErrNotFound, id)
	}
	return err
}
