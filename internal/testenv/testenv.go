// Package testenv holds what trainq's end-to-end test harnesses (e2e, api)
// share: the Temporal CLI, the real binaries, a dev server with trainq's
// search attributes (also one that can be killed and restarted on its
// state), trainq-worker processes, and the checker of what job workers
// record about the GPUs they held. It lives under internal/
// so that only this module can import it; only its tests do.
package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
)

// TemporalCLI returns the Temporal CLI the dev server runs from:
// $TRAINQ_TEMPORAL_BIN, else bin/temporal under the module root, where
// `make test` installs it.
//
// When the tests that need a dev server cannot run, skip is one sentence
// saying why, for the package's TestMain to print once. They are skipped
// when TRAINQ_SKIP_E2E is set, and when bin/temporal is missing on a
// developer's machine (a plain `go test ./...`). A missing CLI is an error,
// not a skip, where it is required: when TRAINQ_TEMPORAL_BIN names it (the
// Makefile does) or under CI, so that a CI run cannot pass by testing
// nothing.
func TemporalCLI(root string) (bin, skip string, err error) {
	if os.Getenv("TRAINQ_SKIP_E2E") != "" {
		return "", "TRAINQ_SKIP_E2E is set", nil
	}
	bin = os.Getenv("TRAINQ_TEMPORAL_BIN")
	required := bin != "" || os.Getenv("CI") != ""
	if bin == "" {
		bin = filepath.Join(root, "bin", "temporal")
	}
	if _, err := os.Stat(bin); err != nil {
		if required {
			return "", "", fmt.Errorf("the Temporal CLI is missing at %s; run `make test` (it installs it) or set TRAINQ_SKIP_E2E=1", bin)
		}
		return "", fmt.Sprintf("no Temporal CLI at %s (`make test` installs it; TRAINQ_TEMPORAL_BIN names another)", bin), nil
	}
	return bin, "", nil
}

// SkipMessage is the one line a package prints when it skips its tests
// that need a dev server.
func SkipMessage(pkg, why string) string {
	return fmt.Sprintf("%s: skipping the tests that need a Temporal dev server: %s", pkg, why)
}

// Build compiles the package pkg of the module at root into the binary out,
// so that the tests run the same programs a user runs. The compiler's
// output goes to stderr, where a failed build explains itself.
func Build(root, out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
	return cmd.Run()
}

// DevServer is a Temporal dev server for one test binary, its state in
// memory, with trainq's custom search attributes registered (without them the
// workflows' upserts and the list filters fail), and a client connected to
// it. It dies with the test binary, even one that crashes (a parent-death
// signal), so a failed run leaves no server behind.
type DevServer struct {
	srv    *PersistentDevServer
	client client.Client
}

// StartDevServer starts a DevServer from the CLI temporalBin. Its output is
// kept only to explain a failed start.
func StartDevServer(temporalBin string) (*DevServer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := StartPersistentDevServer(ctx, temporalBin, "")
	if err != nil {
		return nil, err
	}
	c, err := client.DialContext(ctx, client.Options{HostPort: srv.HostPort()})
	if err != nil {
		srv.Kill()
		return nil, fmt.Errorf("dial the dev server: %w", err)
	}
	return &DevServer{srv: srv, client: c}, nil
}

// Client is connected to the server; Stop closes it.
func (s *DevServer) Client() client.Client { return s.client }

// FrontendHostPort is the server's address.
func (s *DevServer) FrontendHostPort() string { return s.srv.HostPort() }

// Stop closes the client and ends the server (SIGTERM, then SIGKILL after 10s).
func (s *DevServer) Stop() error {
	s.client.Close()
	s.srv.Stop(10 * time.Second)
	return nil
}

// KillLeftoverWorkers ends the process groups of the job workers recorded
// under dataDir, so that a failed test leaves no processes behind.
func KillLeftoverWorkers(dataDir string) {
	pids, _ := filepath.Glob(filepath.Join(dataDir, "jobs", "*", "attempt-*", "worker-*", "pid"))
	for _, p := range pids {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

// WorkerProcess is a running trainq-worker. Its output is kept so that a
// failed test can show what the worker was doing.
type WorkerProcess struct {
	cmd  *exec.Cmd
	log  syncBuffer
	done chan struct{}
}

// StartWorker starts the binary bin with args, in this process's
// environment plus env (which points the worker at the test's dev server).
func StartWorker(bin string, args, env []string) (*WorkerProcess, error) {
	w := &WorkerProcess{done: make(chan struct{})}
	w.cmd = exec.Command(bin, args...)
	w.cmd.Env = append(os.Environ(), env...)
	w.cmd.Stdout, w.cmd.Stderr = &w.log, &w.log
	// A test binary that crashes takes its workers with it (the jobs they
	// started end with their own process groups).
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = w.cmd.Wait(); close(w.done) }()
	return w, nil
}

// Done is closed when the worker has exited.
func (w *WorkerProcess) Done() <-chan struct{} { return w.done }

// Stop ends the worker as an operator would, with SIGTERM, and kills it if
// it has not exited within grace, so that a stuck worker cannot hang the
// test run. Stopping an exited worker does nothing.
func (w *WorkerProcess) Stop(grace time.Duration) {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(grace):
		w.Kill()
	}
}

// Kill ends the worker abruptly, as a crash would, and waits for it.
func (w *WorkerProcess) Kill() {
	_ = w.cmd.Process.Kill()
	<-w.done
}

// LogTail returns the last lines of the worker's output: the end is where
// a failure shows, and the whole log would drown the test's report.
func (w *WorkerProcess) LogTail(lines int) string {
	return tail(w.log.String(), lines)
}

// Pid is the worker's process id.
func (w *WorkerProcess) Pid() int { return w.cmd.Process.Pid }

// Exited reports whether the worker has exited.
func (w *WorkerProcess) Exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// WaitLog waits until the worker's output contains s. It fails if the
// worker exits first or ctx ends, with the end of the output.
func (w *WorkerProcess) WaitLog(ctx context.Context, s string) error {
	for {
		text, changed := w.log.snapshot()
		if strings.Contains(text, s) {
			return nil
		}
		select {
		case <-changed:
		case <-w.done:
			if strings.Contains(w.log.String(), s) {
				return nil
			}
			return fmt.Errorf("the process exited before it logged %q:\n%s", s, w.LogTail(30))
		case <-ctx.Done():
			return fmt.Errorf("the process has not logged %q: %w:\n%s", s, ctx.Err(), w.LogTail(30))
		}
	}
}

func tail(text string, lines int) string {
	parts := strings.Split(text, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// syncBuffer is a bytes.Buffer that a process's output goroutines can
// write while a test reads it, and wait for.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed at the next write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// snapshot returns the text so far and a channel closed at the next write.
func (s *syncBuffer) snapshot() (string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.b.String(), s.changed
}
