package kube

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/scheduler"
)

// JobMeta is what the backend learns about a job beyond its WorkerSpec:
// the priority class (a label), the instance type (CPU and memory requests)
// and whether it is a Jupyter server.
type JobMeta struct {
	PriorityClass string
	InstanceType  string
	Notebook      bool
}

// Jobs tells the backend about jobs; trainq-worker answers from Temporal.
// A nil Jobs, or an error, leaves the labels and requests it would give out.
type Jobs interface {
	// Meta returns what the pods of job are labelled and sized with.
	Meta(ctx context.Context, job string) (JobMeta, error)
	// StopReason says why the worker's attempt ends (the attempt's end
	// reason), and names the preemptor if it was preempted.
	StopReason(ctx context.Context, id cluster.WorkerID) (reason, preemptor string, err error)
	// Ended says whether the job has ended for good (its workflow closed or
	// is gone), so that its Service and pods may be removed.
	Ended(ctx context.Context, job string) (bool, error)
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=/.,:@+%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Command is the container's command line for a worker, as the local
// backend runs it: binary and nogpu run `<script> --k=v ...` through
// /bin/sh; Python types run `python <script> --k=v ...`, once per process
// of the worker (processes_per_worker), each with its own RANK and
// LOCAL_RANK. When one process fails the others get SIGTERM, and the pod
// ends with the first failure's exit code; SIGTERM to the pod reaches every
// process.
func Command(spec cluster.WorkerSpec, python string) []string {
	var flags strings.Builder
	for _, f := range spec.FlagArgs() {
		flags.WriteByte(' ')
		flags.WriteString(shellQuote(f))
	}
	if !cluster.IsPythonType(spec.Type) {
		return []string{"/bin/sh", "-c", spec.InConda(spec.Script + flags.String())}
	}
	run := shellQuote(python) + " " + spec.Script + flags.String()
	procs := spec.Processes()
	if procs == 1 {
		return []string{"/bin/sh", "-c", spec.InConda("exec " + run)}
	}
	var b strings.Builder
	b.WriteString("pids=\ntrap 'kill -TERM $pids 2>/dev/null' TERM INT\n")
	for r := range procs {
		fmt.Fprintf(&b, "(RANK=%d LOCAL_RANK=%d exec %s) &\npids=\"$pids $!\"\n", spec.ID.Worker*procs+r, r, run)
	}
	b.WriteString("rc=0\nfor p in $pids; do\n  wait $p; c=$?\n  if [ $c -ne 0 ] && [ $rc -eq 0 ]; then rc=$c; kill -TERM $pids 2>/dev/null; fi\ndone\nexit $rc\n")
	return []string{"/bin/sh", "-c", spec.InConda(b.String())}
}

// Where a pod's stop notice appears (see AnnotationNotice).
const (
	noticeDir  = "/etc/trainq/notice"
	noticeFile = "notice.json"
	NoticePath = noticeDir + "/" + noticeFile
)

// Env is the container's environment: the worker's variables as the local
// backend gives them to local rank 0 (trainq's own win over env_variables),
// the torchrun variables PyTorchJob sets (PET_NNODES, PET_NODE_RANK,
// PET_NPROC_PER_NODE, PET_MASTER_ADDR, PET_MASTER_PORT), TRAINQ_GPUS with
// the GPU indices trainq granted, and PYTHONUNBUFFERED for Python types.
// CUDA_VISIBLE_DEVICES is left to the device plugin: inside the container
// the granted GPUs are numbered from 0.
func Env(spec cluster.WorkerSpec) []corev1.EnvVar {
	vars := spec.Environment(0)
	gpus := make([]string, len(spec.GPUs))
	for i, g := range spec.GPUs {
		gpus[i] = strconv.Itoa(g)
	}
	nnodes := strconv.Itoa(spec.Workers)
	if spec.Elastic() {
		nnodes = fmt.Sprintf("%d:%d", spec.ElasticMinWorkers, spec.ElasticMaxWorkers)
	}
	extra := map[string]string{
		"PET_NNODES":         nnodes,
		"PET_NODE_RANK":      strconv.Itoa(spec.ID.Worker),
		"PET_NPROC_PER_NODE": strconv.Itoa(spec.Processes()),
		"PET_MASTER_ADDR":    spec.MasterAddr,
		"PET_MASTER_PORT":    strconv.Itoa(spec.MasterPort),
		"TRAINQ_GPUS":        strings.Join(gpus, ","),
	}
	if spec.Notebook {
		extra["TRAINQ_NOTEBOOK_PORT"] = strconv.Itoa(JupyterPort)
	}
	extra[cluster.NoticeFileEnv] = NoticePath
	if _, set := spec.Env["PYTHONUNBUFFERED"]; cluster.IsPythonType(spec.Type) && !set {
		extra["PYTHONUNBUFFERED"] = "1"
	}
	out := make([]corev1.EnvVar, 0, len(vars)+len(extra))
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		if k == "CUDA_VISIBLE_DEVICES" {
			continue
		}
		if x, ok := extra[k]; ok {
			v = x
			delete(extra, k)
		}
		out = append(out, corev1.EnvVar{Name: k, Value: v})
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, corev1.EnvVar{Name: k, Value: extra[k]})
	}
	return out
}

// Resources asks for the worker's GPUs as nvidia.com/gpu, and for the CPU
// cores and memory its instance type names (short forms such as a100.1gpu
// name none: then nothing is requested for them).
func Resources(spec cluster.WorkerSpec, instanceType string) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{}
	if n := len(spec.GPUs); n > 0 {
		q := *resource.NewQuantity(int64(n), resource.DecimalSI)
		r.Limits = corev1.ResourceList{GPUResource: q}
		r.Requests = corev1.ResourceList{GPUResource: q}
	}
	if instanceType == "" {
		return r
	}
	d, err := scheduler.ParseInstanceType(instanceType)
	if err != nil {
		return r
	}
	if r.Requests == nil && (d.CPU > 0 || d.RAMGB > 0) {
		r.Requests = corev1.ResourceList{}
	}
	if d.CPU > 0 {
		r.Requests[corev1.ResourceCPU] = *resource.NewQuantity(int64(d.CPU), resource.DecimalSI)
	}
	if d.RAMGB > 0 {
		r.Requests[corev1.ResourceMemory] = *resource.NewQuantity(int64(d.RAMGB)<<30, resource.BinarySI)
	}
	return r
}

// Pod is the pod of one worker, bound to its node: trainq is the scheduler,
// so the pod names spec.Node in nodeName and never meets kube-scheduler.
// Its hostname and subdomain make <pod>.<service> resolve through the job's
// headless Service; owner is that Service (nil: no owner reference).
func (b *Backend) Pod(spec cluster.WorkerSpec, meta JobMeta, owner *corev1.Service) *corev1.Pod {
	component := "worker"
	if meta.Notebook {
		component = "notebook"
	}
	labels := workerLabels(spec.ID, component)
	if meta.PriorityClass != "" {
		labels[LabelPriorityClass] = meta.PriorityClass
	}
	gpus := make([]string, len(spec.GPUs))
	for i, g := range spec.GPUs {
		gpus[i] = strconv.Itoa(g)
	}
	ann := map[string]string{
		AnnotationJobName: spec.ID.Job,
		AnnotationGPUs:    strings.Join(gpus, ","),
	}
	if meta.InstanceType != "" {
		ann[AnnotationInstanceType] = meta.InstanceType
	}
	name := PodName(spec.ID)
	ports := []corev1.ContainerPort{{Name: "rendezvous", ContainerPort: MasterPort, Protocol: corev1.ProtocolTCP}}
	if meta.Notebook {
		ports = append(ports, corev1.ContainerPort{Name: "jupyter", ContainerPort: JupyterPort, Protocol: corev1.ProtocolTCP})
		ann[AnnotationURL] = b.NotebookURL(spec.ID)
	}
	image := spec.BaseImage
	if image == "" {
		image = b.opts.DefaultImage
	}
	grace := int64(b.opts.TerminationGracePeriod.Seconds())
	noLinks, noToken := false, false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: b.opts.Namespace, Labels: labels, Annotations: ann,
		},
		Spec: corev1.PodSpec{
			NodeName:                      spec.Node,
			Hostname:                      name,
			Subdomain:                     ServiceName(spec.ID.Job),
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			EnableServiceLinks:            &noLinks,
			ServiceAccountName:            b.opts.ServiceAccount,
			// Training code has no business with the API server.
			AutomountServiceAccountToken: &noToken,
			// Bound with nodeName, a pod skips the scheduler's taint checks
			// but not the kubelet's: tolerate the GPU taint.
			Tolerations: []corev1.Toleration{{Key: GPUResource, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name:      ContainerName,
				Image:     image,
				Command:   Command(spec, b.opts.Python),
				Env:       Env(spec),
				Ports:     ports,
				Resources: Resources(spec, meta.InstanceType),
			}},
		},
	}
	for _, s := range b.opts.ImagePullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	// The stop notice: the kubelet writes the annotation into the volume
	// once Notice sets it (and keeps the file absent until then).
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "trainq-notice", VolumeSource: corev1.VolumeSource{
		DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{{
			Path: noticeFile, FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + AnnotationNotice + "']"}}}}}})
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts,
		corev1.VolumeMount{Name: "trainq-notice", MountPath: noticeDir, ReadOnly: true})
	if spec.ShmGB > 0 {
		size := resource.MustParse(fmt.Sprintf("%dGi", spec.ShmGB))
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "dshm", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size}}})
		c := &pod.Spec.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "dshm", MountPath: "/dev/shm"})
	}
	if spec.NoInternet {
		labels[LabelInternet] = "false"
	}
	if owner != nil && owner.UID != "" {
		pod.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Service", Name: owner.Name, UID: owner.UID,
		}}
	}
	return pod
}

// Service is a job's headless Service: it gives every pod of the job the
// DNS name <pod>.<service>, also before the pod is ready (the rendezvous
// happens before anything is ready), and for a Jupyter server the port 8888.
func (b *Backend) Service(job string, notebook bool) *corev1.Service {
	name := ServiceName(job)
	ports := []corev1.ServicePort{{Name: "rendezvous", Port: MasterPort, TargetPort: intstr.FromInt32(MasterPort), Protocol: corev1.ProtocolTCP}}
	component := "worker"
	if notebook {
		component = "notebook"
		ports = append(ports, corev1.ServicePort{Name: "jupyter", Port: JupyterPort, TargetPort: intstr.FromInt32(JupyterPort), Protocol: corev1.ProtocolTCP})
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: b.opts.Namespace,
			Labels: map[string]string{
				LabelManagedBy: ManagedBy, LabelName: "trainq", LabelComponent: component, LabelJob: name,
			},
			Annotations: map[string]string{AnnotationJobName: job},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 map[string]string{LabelManagedBy: ManagedBy, LabelJob: name},
			PublishNotReadyAddresses: true,
			Ports:                    ports,
		},
	}
}

// NotebookURL is where a Jupyter server's pod serves, inside the cluster.
func (b *Backend) NotebookURL(id cluster.WorkerID) string {
	return fmt.Sprintf("http://%s.%s.%s.svc:%d/", PodName(id), ServiceName(id.Job), b.opts.Namespace, JupyterPort)
}
