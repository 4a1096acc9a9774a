// Command dev-cluster is `make dev-cluster`: `make dev` on the
// production-shaped Temporal cluster of internal/tempcluster (PostgreSQL,
// 4 history shards, frontend, history, matching and worker as separate
// processes) instead of the dev server. The cluster's state and logs are in
// .data/cluster (started fresh each time); scripts/dev.sh then finds
// Temporal answering at $TEMPORAL_ADDRESS (default 127.0.0.1:7233) and
// starts trainq-worker and trainq-api on it. Ctrl-C stops everything.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/trainq/trainq/internal/tempcluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dev-cluster:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	addr := os.Getenv("TEMPORAL_ADDRESS")
	if addr == "" {
		addr = "127.0.0.1:7233"
	}
	_, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return err
	}
	bin, err := tempcluster.FindBinaries(root)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, ".data", "cluster")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	fmt.Printf("Starting a Temporal %s cluster: PostgreSQL, 4 history shards, frontend on %s (logs %s/logs)...\n", tempcluster.Version, addr, dir)
	start := time.Now()
	c, err := tempcluster.Start(sctx, bin, tempcluster.Options{Dir: dir, FrontendPort: port})
	if err != nil {
		return err
	}
	defer c.Stop()
	fmt.Printf("The cluster serves at %s after %s; PostgreSQL on 127.0.0.1:%d (user temporal, databases temporal and temporal_visibility).\n",
		c.HostPort(), time.Since(start).Round(100*time.Millisecond), c.Postgres().Port())
	fmt.Println("The Web UI is not part of it: run Temporal's UI server (temporalio/ui-server) with TEMPORAL_ADDRESS=" + c.HostPort() + ".")
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "dev.sh"))
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+c.HostPort(),
		"TRAINQ_WEB_UI=none with the cluster: run Temporal's UI server with TEMPORAL_ADDRESS="+c.HostPort())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	err = cmd.Run()
	if ctx.Err() != nil {
		fmt.Println("Stopping the cluster...")
		return nil
	}
	return err
}
