package config

import (
	"strings"
	"testing"
	"time"
)

const kubeBase = `
regions:
  - name: r
    allocations:
      - name: default
        nodes:
          - {name: gpu-1, family: a100, gpus: 8}
`

func TestKubernetesBackendDefaults(t *testing.T) {
	c, err := parse([]byte("backend: kubernetes\n"+kubeBase), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Backend != BackendKubernetes || c.Kubernetes.Namespace != "trainq-jobs" ||
		c.Kubernetes.TerminationGracePeriod.D() != 30*time.Second || c.Kubernetes.ImagePullTimeout.D() != 2*time.Minute ||
		c.Kubernetes.KeepFinished.D() != 24*time.Hour {
		t.Fatalf("defaults not applied: %+v %+v", c.Backend, c.Kubernetes)
	}
	c, err = parse([]byte(kubeBase), "t.yaml")
	if err != nil || c.Backend != BackendLocal {
		t.Fatalf("backend defaults to local, got %q (%v)", c.Backend, err)
	}
	c, err = parse([]byte("backend: kubernetes\nkubernetes: {namespace: ml, kubeconfig: /k, image_pull_secrets: [regcred], termination_grace_period: 45s, default_image: busybox, keep_finished: 0s}\n"+kubeBase), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if k := c.Kubernetes; k.Namespace != "ml" || k.Kubeconfig != "/k" || len(k.ImagePullSecrets) != 1 || k.TerminationGracePeriod.D() != 45*time.Second || k.DefaultImage != "busybox" || k.KeepFinished.D() != 0 {
		t.Fatalf("fields not read: %+v", k)
	}
}

func TestKubernetesBackendErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"backend: k8s\n" + kubeBase, `backend: "k8s" is not allowed; use "local" or "kubernetes"`},
		{"backend: kubernetes\nkubernetes: {namespace: ML_Jobs}\n" + kubeBase, `kubernetes.namespace: "ML_Jobs" is not a Kubernetes namespace name`},
		{"backend: kubernetes\nkubernetes: {image_pull_secrets: [ok, Bad_Secret]}\n" + kubeBase, `kubernetes.image_pull_secrets[1]: "Bad_Secret" is not a Secret name`},
		{"backend: kubernetes\nkubernetes: {termination_grace_period: 10ms}\n" + kubeBase, `kubernetes.termination_grace_period: must be at least 1s`},
		{"backend: kubernetes\nkubernetes: {termination_grace_period: soon}\n" + kubeBase, `kubernetes.termination_grace_period: "soon" is not a duration`},
		{"backend: kubernetes\nkubernetes: {keep_finished: -1h}\n" + kubeBase, `kubernetes.keep_finished: must not be negative`},
		{"backend: kubernetes\n" + strings.Replace(kubeBase, "gpu-1", "GPU_1", 1), `regions[0].allocations[0].nodes[0].name: "GPU_1" is not a Kubernetes node name`},
	} {
		_, err := parse([]byte(tc.doc), "t.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", err, tc.want)
		}
	}
}

func TestNodeSelector(t *testing.T) {
	const sel = `
regions:
  - name: r
    allocations:
      - name: default
        node_selector: {trainq.io/allocation: demo}
`
	c, err := parse([]byte("backend: kubernetes\n"+sel), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, a, _ := c.Allocation("r", "default"); a.NodeSelector["trainq.io/allocation"] != "demo" || len(a.Nodes) != 0 {
		t.Fatalf("node_selector not read: %+v", a)
	}
	for _, tc := range []struct{ doc, want string }{
		{sel, "needs backend: kubernetes"},
		{"backend: kubernetes\n" + strings.Replace(sel, "demo}", "demo}\n        nodes: [{name: gpu-1, family: a100, gpus: 8}]", 1), "either nodes or node_selector"},
		{"backend: kubernetes\n" + strings.Replace(sel, "trainq.io/allocation: demo", "bad key!: demo", 1), `regions[0].allocations[0].node_selector: "bad key!" is not a label key`},
		{"backend: kubernetes\n" + strings.Replace(sel, ": demo", ": not a value", 1), `node_selector.trainq.io/allocation: "not a value" is not a label value`},
		{"backend: kubernetes\n" + strings.Replace(sel, "demo}", "demo}\n        topology: [example.com/rack, bad key!]", 1),
			`regions[0].allocations[0].topology[1]: "bad key!" is not a label key`},
	} {
		if _, err := parse([]byte(tc.doc), "t.yaml"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error with %q, got %v", tc.want, err)
		}
	}
}
