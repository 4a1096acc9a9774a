// Package kubetest starts a real Kubernetes control plane for tests and for
// `make dev-k8s`: etcd and kube-apiserver built from the Go module proxy
// (tools/kube/install.sh caches them under bin/kube/ by version), and kwok
// playing the kubelet of the nodes labelled kwok.trainq.io/managed=true.
// There is no scheduler and no controller-manager: trainq binds its pods
// itself, and a test drives node failures by hand (SetNodeDown).
package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Versions of the binaries, as tools/kube/install.sh builds them.
const (
	KubeVersion = "v1.32.13"
	EtcdVersion = "v3.6.16"
	KwokVersion = "v0.8.0"
)

// Environment variables that point at the binaries (default: bin/kube/ of
// the repository), and one that turns a missing binary from a skip into a
// failure (set by `make test`).
const (
	EnvAPIServer = "TRAINQ_KUBE_APISERVER"
	EnvEtcd      = "TRAINQ_KUBE_ETCD"
	EnvKwok      = "TRAINQ_KUBE_KWOK"
	EnvRequire   = "TRAINQ_REQUIRE_KUBE"
)

// ManagedLabel marks the nodes whose kubelet kwok plays.
const ManagedLabel = "kwok.trainq.io/managed"

const token = "trainq-test-token"

//go:embed stages.yaml
var stagesYAML []byte

// PodLogText is what every container of the test cluster "printed".
const PodLogText = "kwok plays this container's log\nline 2 of it\n"

// criLog is text as a container runtime stores it (the CRI log format):
// one "<time> stdout F <line>" per line.
func criLog(text string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(strings.TrimSuffix(text, "\n"), "\n") {
		b.WriteString("2026-01-01T00:00:00.000000000Z stdout F " + strings.TrimSuffix(line, "\n") + "\n")
	}
	return b.String()
}

// clusterLogs makes kwok serve the file %s as the log of every container.
const clusterLogs = `
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: trainq-pod-log
spec:
  selector: {}
  logs:
  - containers: []
    logsFile: %s
    follow: false
`

// Cluster is a running control plane.
type Cluster struct {
	// Kubeconfig is the path of a kubeconfig file for the cluster.
	Kubeconfig string
	Config     *rest.Config
	Client     kubernetes.Interface
	// Dir holds etcd's data, the certificates and the logs.
	Dir string
	// Started is how long the control plane took to be ready.
	Started time.Duration
	// PodLog is the file, in the CRI log format, that kwok serves as every
	// container's log through the pod log API: PodLogText.
	PodLog string

	procs []*exec.Cmd
}

// Binaries returns the paths of kube-apiserver, etcd and kwok, and an error
// naming the missing ones.
func Binaries() (apiserver, etcd, kwok string, err error) {
	root := repoRoot()
	pick := func(env, name, version string) string {
		if p := os.Getenv(env); p != "" {
			return p
		}
		return filepath.Join(root, "bin", "kube", name+"-"+version)
	}
	apiserver = pick(EnvAPIServer, "kube-apiserver", KubeVersion)
	etcd = pick(EnvEtcd, "etcd", EtcdVersion)
	kwok = pick(EnvKwok, "kwok", KwokVersion)
	var missing []error
	for _, p := range []string{apiserver, etcd, kwok} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, fmt.Errorf("%s is missing", p))
		}
	}
	if len(missing) > 0 {
		return "", "", "", fmt.Errorf("%w; build them with `make kube-bins` (tools/kube/install.sh)", errors.Join(missing...))
	}
	return apiserver, etcd, kwok, nil
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Start starts a cluster for the test and stops it when the test ends. A
// missing binary skips the test, or fails it when TRAINQ_REQUIRE_KUBE=1.
func Start(t testing.TB) *Cluster {
	t.Helper()
	if _, _, _, err := Binaries(); err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	c, err := RunRetried(t.TempDir(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"kube-apiserver.log", "kwok.log"} {
				if b, err := os.ReadFile(filepath.Join(c.Dir, name)); err == nil {
					t.Logf("last lines of %s:\n%s", name, tailBytes(b, 3000))
				}
			}
		}
		c.Stop()
	})
	t.Logf("test cluster ready in %v (%s)", c.Started.Round(time.Millisecond), c.Config.Host)
	return c
}

func tailBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Run starts etcd, kube-apiserver and kwok with their state and logs under
// dir, and returns once the API server is ready and kwok runs. Stop ends
// them.
func Run(ctx context.Context, dir string) (*Cluster, error) {
	apiserverBin, etcdBin, kwokBin, err := Binaries()
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	ports := make([]int, 4) // etcd, etcd peers, kube-apiserver, kwok's kubelet API
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	if err := c.start(filepath.Join(dir, "etcd.log"), etcdBin,
		"--name", "default", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL, "--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return nil, err
	}

	// Service account keys, a token file, and certificates the API server
	// makes itself in its cert dir.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	keyFile, pubFile, tokenFile := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub"), filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(tokenFile, []byte(token+",admin,admin,system:masters\n"), 0o600); err != nil {
		return nil, err
	}
	port := ports[2]
	if err := c.start(filepath.Join(dir, "kube-apiserver.log"), apiserverBin,
		"--etcd-servers", etcdURL, "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(port), "--cert-dir", filepath.Join(dir, "certs"),
		"--token-auth-file", tokenFile, "--authorization-mode", "AlwaysAllow",
		"--disable-admission-plugins", "ServiceAccount",
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-account-key-file", pubFile,
		"--service-account-signing-key-file", keyFile, "--service-cluster-ip-range", "10.96.0.0/24",
		"--allow-privileged", "--enable-priority-and-fairness=false", "--v", "0",
		"--kubelet-preferred-address-types", "InternalIP"); err != nil {
		return nil, err
	}
	host := fmt.Sprintf("https://127.0.0.1:%d", port)
	c.Config = &rest.Config{Host: host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 100, Burst: 200}
	if err := waitReady(ctx, host); err != nil {
		return nil, err
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kubeconfig(host), 0o600); err != nil {
		return nil, err
	}
	// kwok serves the kubelet API (container logs) on one port for every
	// node, over TLS with the API server's own certificate, which the API
	// server does not verify (no --kubelet-certificate-authority).
	c.PodLog = filepath.Join(dir, "pod.log")
	if err := os.WriteFile(c.PodLog, []byte(criLog(PodLogText)), 0o644); err != nil {
		return nil, err
	}
	stages := filepath.Join(dir, "kwok-stages.yaml")
	if err := os.WriteFile(stages, append(stagesYAML, fmt.Sprintf(clusterLogs, c.PodLog)...), 0o644); err != nil {
		return nil, err
	}
	certs := filepath.Join(dir, "certs")
	if err := c.start(filepath.Join(dir, "kwok.log"), kwokBin,
		"--kubeconfig", c.Kubeconfig, "--config", stages,
		"--manage-nodes-with-label-selector", ManagedLabel+"=true",
		"--server-address", fmt.Sprintf("127.0.0.1:%d", ports[3]), "--node-ip", "127.0.0.1", "--node-port", strconv.Itoa(ports[3]),
		"--tls-cert-file", filepath.Join(certs, "apiserver.crt"), "--tls-private-key-file", filepath.Join(certs, "apiserver.key")); err != nil {
		return nil, err
	}
	// The default namespace exists once the API server's own controllers
	// created it.
	for {
		if _, err := c.Client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the default namespace never appeared: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	c.Started = time.Since(begin)
	ok = true
	return c, nil
}

func kubeconfig(host string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: trainq-test
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: %q}
contexts:
- name: trainq-test
  context: {cluster: trainq-test, user: admin}
current-context: trainq-test
`, host, token))
}

// RunRetried is Run with up to three tries, each in its own directory under dir and given two
// minutes. Run picks its ports free and binds them a moment later, so a process of a test running
// beside it may take one first, and then the cluster never serves: a failed start is tried again
// on new ports, and logf shows the tail of its logs.
func RunRetried(dir string, logf func(format string, args ...any)) (*Cluster, error) {
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		tryDir := filepath.Join(dir, fmt.Sprintf("try-%d", try))
		c, err := Run(ctx, tryDir)
		cancel()
		if err == nil {
			return c, nil
		}
		for _, name := range []string{"etcd.log", "kube-apiserver.log", "kwok.log"} {
			if b, rerr := os.ReadFile(filepath.Join(tryDir, name)); rerr == nil {
				logf("test cluster start %d failed; last lines of %s:\n%s", try, name, tailBytes(b, 2000))
			}
		}
		if try == 3 {
			return nil, err
		}
		logf("test cluster start %d failed (%v); trying again on new ports", try, err)
	}
}

// waitReady polls /readyz until the API server says ok (there is nothing
// to watch before it serves).
func waitReady(ctx context.Context, host string) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, host+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/readyz: %s: %s", resp.Status, tailBytes(body, 500))
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver was not ready in time: %v", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// start runs a process with its output in logPath, in its own process
// group, ended by Stop.
func (c *Cluster) start(logPath, bin string, args ...string) error {
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", bin, err)
	}
	_ = logf.Close() // the child has its own descriptor
	c.procs = append(c.procs, cmd)
	return nil
}

// Stop ends kwok, the API server and etcd, in that order.
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		_ = syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	c.procs = nil
}

// Node describes a fake GPU node.
type Node struct {
	Name     string
	GPUs     int
	CPU      int
	MemoryGi int
	Labels   map[string]string
}

// AddNode creates a node that kwok manages, with the given allocatable
// nvidia.com/gpu, CPU and memory, and waits until it is Ready.
func (c *Cluster) AddNode(ctx context.Context, n Node) error {
	cpu, mem := n.CPU, n.MemoryGi
	if cpu == 0 {
		cpu = 96
	}
	if mem == 0 {
		mem = 768
	}
	// kwok gets the node only once its capacity is set (the label last),
	// so that it never renders a status without the GPUs.
	labels := map[string]string{"kubernetes.io/hostname": n.Name}
	for k, v := range n.Labels {
		labels[k] = v
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(cpu), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(mem)<<30, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
		"nvidia.com/gpu":      *resource.NewQuantity(int64(n.GPUs), resource.DecimalSI),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels, Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0"}},
		Status:     corev1.NodeStatus{Capacity: res, Allocatable: res},
	}
	created, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", n.Name, err)
	}
	// A new node's status is dropped on create: set it.
	created.Status = node.Status
	if _, err := c.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("set the capacity of node %s: %w", n.Name, err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{ManagedLabel: "true"}}})
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("hand node %s to kwok: %w", n.Name, err)
	}
	return c.WaitNodeReady(ctx, n.Name, true)
}

// WaitNodeReady watches the node until its Ready condition is (or is not) True.
func (c *Cluster) WaitNodeReady(ctx context.Context, name string, ready bool) error {
	w, err := c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: Ready never became %v: %w", name, ready, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return c.WaitNodeReady(ctx, name, ready)
			}
			if n, isNode := ev.Object.(*corev1.Node); isNode && nodeIsReady(n) == ready {
				return nil
			}
		}
	}
}

func nodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// SetNodeDown takes the node's kubelet away (down: kwok stops managing the
// node and its pods, and the node's Ready condition turns Unknown, as the
// node controller sets it when a kubelet stops posting its status) or
// brings it back (kwok manages it again and marks it Ready).
func (c *Cluster) SetNodeDown(ctx context.Context, name string, down bool) error {
	nodes := c.Client.CoreV1().Nodes()
	value := any("true")
	if down {
		value = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{ManagedLabel: value}}})
	if _, err := nodes.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	if !down {
		return c.WaitNodeReady(ctx, name, true)
	}
	now := metav1.Now()
	st, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{
		"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
		"message": "Kubelet stopped posting node status.", "lastHeartbeatTime": now, "lastTransitionTime": now,
	}}}})
	if _, err := nodes.Patch(ctx, name, types.StrategicMergePatchType, st, metav1.PatchOptions{}, "status"); err != nil {
		return err
	}
	return c.WaitNodeReady(ctx, name, false)
}

// CreateNamespace creates a namespace (which, without a kubelet and a
// namespace controller's help, is never removed: use a fresh name per test).
func (c *Cluster) CreateNamespace(ctx context.Context, name string) error {
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}
