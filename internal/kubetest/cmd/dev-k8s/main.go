// Command dev-k8s is `make dev-k8s`: it starts the test cluster (etcd,
// kube-apiserver and kwok, see package kubetest) with one fake GPU node per
// node of the trainq config, writes a copy of that config with
// backend: kubernetes, and runs scripts/dev.sh on it (a Temporal dev
// server, trainq-worker and trainq-api), so that jobs run as pods. Ctrl-C
// stops everything.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/internal/kubetest"
)

const namespace = "trainq-jobs"

func main() {
	out := flag.String("dir", ".data/kube", "where the cluster keeps its state, logs, kubeconfig and the trainq config")
	flag.Parse()
	if err := run(*out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "dev-k8s:", err)
		os.Exit(1)
	}
}

func run(dir string, devArgs []string) error {
	src := os.Getenv(config.EnvFile)
	cfg, err := config.Load(src)
	if err != nil {
		return err
	}
	var text []byte
	if src == "" {
		text, err = os.ReadFile("config/default.yaml")
	} else {
		text, err = os.ReadFile(src)
	}
	if err != nil {
		return err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return err
	}
	_ = os.RemoveAll(filepath.Join(dir, "cluster")) // a fresh cluster each time
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, err := kubetest.Run(sctx, filepath.Join(dir, "cluster"))
	if err != nil {
		return err
	}
	defer c.Stop()
	if err := c.CreateNamespace(sctx, namespace); err != nil {
		return err
	}
	for _, ref := range cfg.Allocations() {
		for _, n := range ref.Allocation.Nodes {
			if err := c.AddNode(sctx, kubetest.Node{Name: n.Name, GPUs: n.GPUs, CPU: n.CPU, MemoryGi: n.RAMGB,
				Labels: map[string]string{"trainq.io/allocation": ref.Allocation.Name}}); err != nil {
				return err
			}
		}
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	b, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, b, 0o600); err != nil {
		return err
	}
	if strings.Contains(string(text), "\nbackend:") || strings.HasPrefix(string(text), "backend:") {
		return fmt.Errorf("%s already names a backend; dev-k8s sets backend: kubernetes itself", src)
	}
	cfgPath := filepath.Join(dir, "trainq.yaml")
	extra := fmt.Sprintf("\n# Added by make dev-k8s: jobs run as pods on the local test cluster.\nbackend: kubernetes\nkubernetes:\n  namespace: %s\n  kubeconfig: %s\n  default_image: busybox:1.36\n", namespace, kubeconfig)
	if err := os.WriteFile(cfgPath, append(text, extra...), 0o644); err != nil {
		return err
	}
	fmt.Printf(`Kubernetes test cluster ready in %v: kube-apiserver %s, %d kwok nodes, namespace %s.
  kubeconfig:   %s   (export KUBECONFIG=%s)
  trainq config: %s
  logs:         %s/{etcd,kube-apiserver,kwok}.log
  Pods end when told to: env_variables KWOK_EXIT_AFTER=30s (and KWOK_EXIT_CODE=1) on a job.

`, c.Started.Round(time.Millisecond), c.Config.Host, len(cfg.Nodes()), namespace, kubeconfig, kubeconfig, cfgPath, c.Dir)
	cmd := exec.CommandContext(ctx, "scripts/dev.sh", devArgs...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), config.EnvFile+"="+cfgPath, "KUBECONFIG="+kubeconfig)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	err = cmd.Run()
	fmt.Println("Stopping the Kubernetes test cluster...")
	if ctx.Err() != nil {
		return nil // Ctrl-C
	}
	return err
}
