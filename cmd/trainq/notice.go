package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
)

// runNotice prints the worker's stop notice (see protocol.WorkerNotice), for
// scripts that ask rather than watch the file: exit 0 with the notice, 1 if
// there is none (yet); --wait blocks until one comes or --timeout passes.
func runNotice(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "notice")
	wait := fs.Bool("wait", false, "wait until a notice comes")
	timeout := fs.Duration("timeout", 0, "with --wait, give up after this long (0: wait for ever)")
	if _, err := parseArgs(g, fs, args, 0, 0); err != nil {
		return err
	}
	path := os.Getenv(cluster.NoticeFileEnv)
	if path == "" {
		return usageErr("notice: $%s is not set: run this inside a trainq worker", cluster.NoticeFileEnv)
	}
	var deadline <-chan time.Time
	if *wait && *timeout > 0 {
		t := time.NewTimer(*timeout)
		defer t.Stop()
		deadline = t.C
	}
	for {
		n, ok, err := readNotice(path)
		if err != nil {
			return err
		}
		if ok {
			return printNotice(g, n)
		}
		if !*wait {
			return &exitError{code: 1, msg: "no notice: the worker is not being stopped"}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return &exitError{code: 1, msg: fmt.Sprintf("no notice within %s", *timeout)}
		case <-time.After(200 * time.Millisecond): // the file has no change feed the CLI can wait on
		}
	}
}

// readNotice reads the notice file; ok is false while there is none.
func readNotice(path string) (n protocol.WorkerNotice, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(data) == 0) {
		return n, false, nil // a Kubernetes notice volume shows an empty file until the annotation is set
	}
	if err != nil {
		return n, false, err
	}
	if err := json.Unmarshal(data, &n); err != nil {
		return n, false, fmt.Errorf("notice file %s: %w", path, err)
	}
	return n, true, nil
}

func printNotice(g *globals, n protocol.WorkerNotice) error {
	if g.json() {
		return g.printJSON(noticeOutput(n))
	}
	by := ""
	if n.By != nil {
		by = fmt.Sprintf(" by a %s %s", n.By.Class, n.By.Kind)
	}
	fmt.Fprintf(g.Stdout, "%s%s: save your work and exit by %s (in %s); SIGTERM comes then.\n",
		n.Reason, by, n.Deadline.UTC().Format(time.RFC3339), time.Until(n.Deadline).Round(time.Second))
	return nil
}
