package testenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/trainq/trainq/protocol"
)

// PersistentDevServer is a Temporal dev server that keeps its state in a
// SQLite file, so that a test can kill it (kill -9, as a crash would) and
// start it again on the same state and the same port: clients connected to
// it reconnect by themselves. trainq's search attributes are registered at
// every start.
type PersistentDevServer struct {
	bin, dbFile string
	port        int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *syncBuffer
}

// StartPersistentDevServer starts `temporal server start-dev` from the CLI
// temporalBin, headless, with its state in dbFile (""; in memory, gone with
// the process), on a free port of 127.0.0.1, and returns once it serves the
// default namespace.
func StartPersistentDevServer(ctx context.Context, temporalBin, dbFile string) (*PersistentDevServer, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	s := &PersistentDevServer{bin: temporalBin, dbFile: dbFile, port: port}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// FreePort returns a TCP port of 127.0.0.1 that was free when asked.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// HostPort is the server's frontend address; it stays the same across restarts.
func (s *PersistentDevServer) HostPort() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// DBFile is the SQLite file that holds the server's state.
func (s *PersistentDevServer) DBFile() string { return s.dbFile }

// Start starts the server on its file and port, and waits until it serves
// the default namespace or ctx ends. Starting a running server is an error.
func (s *PersistentDevServer) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.cmd != nil {
		select {
		case <-s.done:
		default:
			s.mu.Unlock()
			return errors.New("the dev server is already running")
		}
	}
	uiPort, err := FreePort()
	if err != nil {
		s.mu.Unlock()
		return err
	}
	args := []string{"server", "start-dev", "--headless",
		"--ip", "127.0.0.1", "--port", strconv.Itoa(s.port), "--ui-port", strconv.Itoa(uiPort),
		"--log-level", "error",
		"--dynamic-config-value", "frontend.enableServerVersionCheck=false",
	}
	if s.dbFile != "" {
		args = append(args, "--db-filename", s.dbFile)
	}
	args = append(args, protocol.DevServerArgs()...)
	cmd := exec.Command(s.bin, args...)
	// A test binary that crashes takes its server with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("start the dev server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done, s.log = cmd, done, log
	s.mu.Unlock()
	return s.waitReady(ctx, done, log)
}

// waitReady dials the server until it answers for the default namespace.
// A server that exits meanwhile is an error that shows its output.
func (s *PersistentDevServer) waitReady(ctx context.Context, done <-chan struct{}, log *syncBuffer) error {
	var last error
	for {
		select {
		case <-done:
			return fmt.Errorf("the dev server exited while starting: %s", log.String())
		case <-ctx.Done():
			return fmt.Errorf("the dev server on %s is not ready: %v (last error: %v) %s", s.HostPort(), ctx.Err(), last, log.String())
		default:
		}
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := client.DialContext(dctx, client.Options{HostPort: s.HostPort(), Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
		if err == nil {
			_, err = c.WorkflowService().DescribeNamespace(dctx, &workflowservice.DescribeNamespaceRequest{Namespace: client.DefaultNamespace})
			c.Close()
		}
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-done:
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it to
// exit. Killing a stopped server does nothing.
func (s *PersistentDevServer) Kill() {
	s.signal(syscall.SIGKILL, 0)
}

// Stop ends the server with SIGTERM, and with SIGKILL if it has not exited
// within grace.
func (s *PersistentDevServer) Stop(grace time.Duration) {
	s.signal(syscall.SIGTERM, grace)
}

func (s *PersistentDevServer) signal(sig syscall.Signal, grace time.Duration) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	if sig != syscall.SIGKILL {
		select {
		case <-done:
			return
		case <-time.After(grace):
			_ = cmd.Process.Kill()
		}
	}
	<-done
}

// LogTail returns the last lines of the server's output since its last start.
func (s *PersistentDevServer) LogTail(lines int) string {
	s.mu.Lock()
	log := s.log
	s.mu.Unlock()
	if log == nil {
		return ""
	}
	return tail(log.String(), lines)
}
