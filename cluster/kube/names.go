package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/trainq/trainq/cluster"
)

// Labels and annotations trainq puts on the pods and Services it creates.
// The labels select; the annotations keep what does not fit a label value
// (the whole job name, the GPU indices) and why a pod was stopped.
const (
	LabelManagedBy     = "app.kubernetes.io/managed-by"
	LabelName          = "app.kubernetes.io/name"
	LabelComponent     = "app.kubernetes.io/component"
	LabelJob           = "trainq.io/job"
	LabelAttempt       = "trainq.io/attempt"
	LabelWorker        = "trainq.io/worker"
	LabelPriorityClass = "trainq.io/priority-class"
	// LabelInternet is "false" on the pods of a job that asked for no
	// internet access (internet: false): a NetworkPolicy selecting it
	// enforces that (see docs/rest-api.md, the internet field).
	LabelInternet = "trainq.io/internet"

	ManagedBy = "trainq"

	AnnotationJobName      = "trainq.io/job-name"
	AnnotationGPUs         = "trainq.io/gpus"
	AnnotationInstanceType = "trainq.io/instance-type"
	AnnotationURL          = "trainq.io/url"
	// AnnotationNotice holds a worker's stop notice (protocol.WorkerNotice
	// as JSON); a downward-API volume shows it to the container at
	// NoticePath, the path its $TRAINQ_NOTICE_FILE names.
	AnnotationNotice     = "trainq.io/notice"
	AnnotationStopReason = "trainq.io/stop-reason"
	AnnotationPreemptor  = "trainq.io/preemptor"
	AnnotationStoppedAt  = "trainq.io/stop-requested-at"

	// ContainerName is the name of the one container of a worker pod.
	ContainerName = "worker"
	// MasterPort is the rendezvous port of every attempt (torchrun's
	// default): each pod has its own network namespace, so it never clashes.
	MasterPort = 29500
	// JupyterPort is where a Jupyter server's pod listens.
	JupyterPort = 8888
	// GPUResource is the extended resource the NVIDIA device plugin serves.
	GPUResource = "nvidia.com/gpu"
)

// maxPlainBase is the longest job name used as it is in object names: the
// pod name <base>-a<attempt>-w<worker> must stay a DNS label (63
// characters), since it is also the pod's hostname.
const maxPlainBase = 47

// JobBase returns the name of a job's headless Service and the value of its
// trainq.io/job label: the job name itself when it is already a DNS-1035
// label of at most 47 characters (ML Space's lm-mpi-job-<uuid> is), and
// otherwise a lowercased, shortened form with a hash of the whole name, so
// two job names never share a base.
func JobBase(job string) string {
	if len(job) <= maxPlainBase && isDNS1035(job) {
		return job
	}
	var b strings.Builder
	for _, r := range strings.ToLower(job) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := b.String()
	if len(s) > 36 {
		s = s[:36]
	}
	s = strings.Trim(s, "-")
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		s = "j" + s
	}
	sum := sha256.Sum256([]byte(job))
	return s + "-" + hex.EncodeToString(sum[:])[:8]
}

func isDNS1035(s string) bool {
	if s == "" || len(s) > 63 || s[0] < 'a' || s[0] > 'z' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// PodName is the name, and the hostname, of a worker's pod:
// <job>-a<attempt>-w<worker>.
func PodName(id cluster.WorkerID) string {
	return fmt.Sprintf("%s-a%d-w%d", JobBase(id.Job), id.Attempt, id.Worker)
}

// ServiceName is the name of a job's headless Service, which is also the
// subdomain of its pods.
func ServiceName(job string) string { return JobBase(job) }

// MasterAddr is the DNS name of worker 0 of an attempt inside the
// namespace: <pod of worker 0>.<service>.
func MasterAddr(job string, attempt int) string {
	return PodName(cluster.WorkerID{Job: job, Attempt: attempt}) + "." + ServiceName(job)
}

// workerLabels are the labels of one worker's pod, without the priority class.
func workerLabels(id cluster.WorkerID, component string) map[string]string {
	return map[string]string{
		LabelManagedBy: ManagedBy,
		LabelName:      "trainq",
		LabelComponent: component,
		LabelJob:       JobBase(id.Job),
		LabelAttempt:   strconv.Itoa(id.Attempt),
		LabelWorker:    strconv.Itoa(id.Worker),
	}
}
