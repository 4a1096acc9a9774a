package kubernetes_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	kubeb "github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/internal/kubetest"
)

// build runs kustomize on a directory of this one.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "kustomize build %s", dir)
	var out []*unstructured.Unstructured
	for _, r := range res.Resources() {
		m, err := r.Map()
		require.NoError(t, err)
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}

// TestManifestsApplyOnAnAPIServer builds the base and the dev overlay and
// applies every object with a server-side dry run on a real kube-apiserver,
// which validates each against its schema; the namespaces are created for
// real first (a dry run in a namespace needs it). The trainq config they
// carry must load, with backend kubernetes.
func TestManifestsApplyOnAnAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	disc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))

	for _, dir := range []string{"base", "overlays/dev"} {
		objs := build(t, dir)
		kinds := map[string]int{}
		for _, o := range objs {
			kinds[o.GetKind()]++
			if o.GetKind() == "Namespace" {
				_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.GetName()}}, metav1.CreateOptions{})
				if err != nil && !strings.Contains(err.Error(), "already exists") {
					require.NoError(t, err)
				}
			}
		}
		assert.Equal(t, map[string]int{"Namespace": 2, "ServiceAccount": 1, "Role": 1, "RoleBinding": 1, "ClusterRole": 1,
			"ClusterRoleBinding": 1, "ConfigMap": 1, "Secret": 1, "Deployment": 3, "Service": 1, "PodDisruptionBudget": 2, "NetworkPolicy": 1}, kinds, dir)
		for _, o := range objs {
			gvk := o.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			require.NoError(t, err, "%s %s", gvk, o.GetName())
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if m.Scope.Name() == "namespace" {
				require.NotEmpty(t, o.GetNamespace(), "%s %s names its namespace", o.GetKind(), o.GetName())
				ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
			}
			_, err = ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "trainq-deploy-test", DryRun: []string{metav1.DryRunAll}, Force: true})
			require.NoError(t, err, "%s: server-side dry run of %s %s/%s", dir, o.GetKind(), o.GetNamespace(), o.GetName())

			switch o.GetKind() {
			case "NetworkPolicy":
				// It must select exactly the pods the kube backend labels for internet: false.
				sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "podSelector", "matchLabels")
				assert.Equal(t, map[string]string{kubeb.LabelInternet: "false"}, sel)
				assert.Equal(t, "trainq-jobs", o.GetNamespace(), "the jobs' namespace")
			case "ConfigMap":
				text, _, _ := unstructured.NestedString(o.Object, "data", "trainq.yaml")
				path := filepath.Join(t.TempDir(), "trainq.yaml")
				require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
				cfg, err := config.Load(path)
				require.NoError(t, err, "%s: the trainq config of the ConfigMap", dir)
				assert.Equal(t, config.BackendKubernetes, cfg.Backend)
				assert.Equal(t, "trainq-jobs", cfg.Kubernetes.Namespace)
			case "Deployment":
				v, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "template", "spec", "terminationGracePeriodSeconds")
				grace := number(v)
				assert.Greater(t, grace, int64(10), "%s: the grace exceeds the agents' WorkerStopTimeout (10s)", o.GetName())
				if dir == "base" {
					// Two of the workflow workers and of the API; one agents
					// process, never two at once.
					r, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas")
					replicas := number(r)
					strategy, _, _ := unstructured.NestedString(o.Object, "spec", "strategy", "type")
					want := map[string]int64{"trainq-worker": 2, "trainq-api": 2, "trainq-agents": 1}[o.GetName()]
					assert.Equal(t, want, replicas, "%s replicas", o.GetName())
					if o.GetName() == "trainq-agents" {
						assert.Equal(t, "Recreate", strategy)
					}
				}
			}
		}
		checkDisruptionBudgets(t, dir, objs)
	}
	// Nothing but the namespaces was stored.
	deps, err := c.Client.AppsV1().Deployments("trainq").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, deps.Items)
}

// checkDisruptionBudgets: each PodDisruptionBudget selects the pods of one
// Deployment and leaves room to evict one of them, so that a node's drain
// is never blocked for good (a budget of one available over one replica
// would be).
func checkDisruptionBudgets(t *testing.T, dir string, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, pdb := range objs {
		if pdb.GetKind() != "PodDisruptionBudget" {
			continue
		}
		sel, _, _ := unstructured.NestedStringMap(pdb.Object, "spec", "selector", "matchLabels")
		require.NotEmpty(t, sel, "%s: PodDisruptionBudget %s selects by labels", dir, pdb.GetName())
		minAvailable, _, _ := unstructured.NestedFieldNoCopy(pdb.Object, "spec", "minAvailable")
		var selected []string
		for _, d := range objs {
			labels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
			if d.GetKind() != "Deployment" || !labelsMatch(sel, labels) {
				continue
			}
			selected = append(selected, d.GetName())
			replicas, _, _ := unstructured.NestedFieldNoCopy(d.Object, "spec", "replicas")
			assert.Less(t, number(minAvailable), number(replicas),
				"%s: PodDisruptionBudget %s keeps %v of Deployment %s's %v replicas available: no pod of it could ever be evicted", dir, pdb.GetName(), minAvailable, d.GetName(), replicas)
		}
		assert.Len(t, selected, 1, "%s: PodDisruptionBudget %s selects the pods of exactly one Deployment, got %v", dir, pdb.GetName(), selected)
	}
}

// labelsMatch says whether labels carry every label of sel.
func labelsMatch(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// number reads a whole number of a decoded manifest (YAML and JSON decode
// them as int, int64 or float64).
func number(v any) int64 {
	switch n := v.(type) {
	case int:
		return int64(n)
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return 0
}
