package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trainq/trainq/scheduler"
)

// Backends.
const (
	BackendLocal      = "local"
	BackendKubernetes = "kubernetes"
)

// Kubernetes configures the Kubernetes backend (backend: kubernetes): every
// worker is a pod in Namespace, bound by trainq to its granted node.
type Kubernetes struct {
	// Namespace holds the jobs' pods and Services. Default "trainq-jobs".
	Namespace string `json:"namespace"`
	// Kubeconfig is a kubeconfig file; empty means the pod's service
	// account when trainq-worker runs in the cluster, else $KUBECONFIG or
	// ~/.kube/config.
	Kubeconfig string `json:"kubeconfig"`
	// ImagePullSecrets are the names of Secrets in Namespace that every
	// pod pulls its image with.
	ImagePullSecrets []string `json:"image_pull_secrets"`
	// TerminationGracePeriod is the pods' terminationGracePeriodSeconds,
	// the grace of a deletion that is not trainq's (a drain, kubectl
	// delete); trainq's own stops use the allocation's stop_grace_period.
	// Default 30s.
	TerminationGracePeriod Duration `json:"termination_grace_period"`
	// DefaultImage runs jobs that name no base_image.
	DefaultImage string `json:"default_image"`
	// ServiceAccount runs the pods (default: the namespace's default).
	ServiceAccount string `json:"service_account"`
	// ImagePullTimeout is how long a pod may fail to pull its image before
	// its attempt fails. Default 2m.
	ImagePullTimeout Duration `json:"image_pull_timeout"`
	// KeepFinished is how long the Service and pods of an ended job stay
	// (for kubectl logs and events) before trainq deletes them. Default
	// 24h; "0s" keeps them for ever.
	KeepFinished *Duration `json:"keep_finished"`
}

// validateBackend checks backend and kubernetes, filling their defaults.
func (c *Config) validateBackend() error {
	switch c.Backend {
	case "":
		c.Backend = BackendLocal
	case BackendLocal, BackendKubernetes:
	default:
		return fmt.Errorf("backend: %q is not allowed; use %q or %q", c.Backend, BackendLocal, BackendKubernetes)
	}
	k := &c.Kubernetes
	if k.Namespace == "" {
		k.Namespace = "trainq-jobs"
	}
	if !dnsLabel(k.Namespace) {
		return fmt.Errorf("kubernetes.namespace: %q is not a Kubernetes namespace name (at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit)", k.Namespace)
	}
	for i, s := range k.ImagePullSecrets {
		if !dnsSubdomain(s) {
			return fmt.Errorf("kubernetes.image_pull_secrets[%d]: %q is not a Secret name (lowercase letters, digits, '-' and '.')", i, s)
		}
	}
	if k.ServiceAccount != "" && !dnsSubdomain(k.ServiceAccount) {
		return fmt.Errorf("kubernetes.service_account: %q is not a ServiceAccount name (lowercase letters, digits, '-' and '.')", k.ServiceAccount)
	}
	if k.TerminationGracePeriod == 0 {
		k.TerminationGracePeriod = Duration(30 * time.Second)
	}
	if k.TerminationGracePeriod.D() < time.Second {
		return errors.New("kubernetes.termination_grace_period: must be at least 1s")
	}
	if k.ImagePullTimeout == 0 {
		k.ImagePullTimeout = Duration(2 * time.Minute)
	}
	if k.ImagePullTimeout.D() < time.Second {
		return errors.New("kubernetes.image_pull_timeout: must be at least 1s")
	}
	if k.KeepFinished == nil {
		d := Duration(24 * time.Hour)
		k.KeepFinished = &d
	}
	if *k.KeepFinished < 0 {
		return errors.New("kubernetes.keep_finished: must not be negative")
	}
	if c.Backend != BackendKubernetes {
		return nil
	}
	// Pods are bound to nodes by name: every node must be a Kubernetes node name.
	for ri, r := range c.Regions {
		for ai, a := range r.Allocations {
			for ni, n := range a.Nodes {
				if !dnsSubdomain(n.Name) {
					return fmt.Errorf("regions[%d].allocations[%d].nodes[%d].name: %q is not a Kubernetes node name (lowercase letters, digits, '-' and '.'), and backend is kubernetes", ri, ai, ni, n.Name)
				}
			}
		}
	}
	return nil
}

// checkNodeSelector checks an allocation's node_selector: label keys and
// values as Kubernetes accepts them, only with backend kubernetes, and
// never together with a node list.
func (c *Config) checkNodeSelector(field string, a Allocation) error {
	if len(a.NodeSelector) == 0 {
		return nil
	}
	if c.Backend != BackendKubernetes {
		return fmt.Errorf("%s.node_selector: selects Kubernetes nodes, so it needs backend: kubernetes (backend is %s); list the nodes instead", field, c.Backend)
	}
	if len(a.Nodes) > 0 {
		return fmt.Errorf("%s: give either nodes or node_selector, not both", field)
	}
	keys := make([]string, 0, len(a.NodeSelector))
	for k := range a.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("%s.node_selector: %q is not a label key: %s", field, k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(a.NodeSelector[k]); len(errs) > 0 {
			return fmt.Errorf("%s.node_selector.%s: %q is not a label value: %s", field, k, a.NodeSelector[k], strings.Join(errs, "; "))
		}
	}
	for i, level := range a.Topology {
		if errs := validation.IsQualifiedName(level); len(errs) > 0 {
			return fmt.Errorf("%s.topology[%d]: %q is not a label key (with node_selector each level is the node label that names the node's domain there): %s", field, i, level, strings.Join(errs, "; "))
		}
	}
	return nil
}

// WithNodes returns a copy of the config in which allocation region/alloc
// has nodes (the nodes its node_selector picks now); c is left alone.
func (c *Config) WithNodes(region, alloc string, nodes []scheduler.Node) *Config {
	out := *c
	out.Regions = make([]Region, len(c.Regions))
	for ri, r := range c.Regions {
		out.Regions[ri] = r
		out.Regions[ri].Allocations = append([]Allocation(nil), r.Allocations...)
		for ai := range r.Allocations {
			if r.Name == region && r.Allocations[ai].Name == alloc {
				out.Regions[ri].Allocations[ai].Nodes = append([]scheduler.Node(nil), nodes...)
			}
		}
	}
	return &out
}

func dnsLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func dnsSubdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, part := range strings.Split(s, ".") {
		if !dnsLabel(part) {
			return false
		}
	}
	return true
}
