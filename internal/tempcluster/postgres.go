package tempcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Postgres is a PostgreSQL server of Debian's package (or any on PATH),
// with its data directory under the cluster's directory, listening on
// 127.0.0.1 only, trusting local connections (it is a test database).
// As root it runs as the postgres user (initdb and postgres refuse root).
type Postgres struct {
	binDir, dataDir, sockDir string
	port                     int
	cred                     *syscall.Credential
	tmp                      string // the temp directory of dataDir and sockDir, when not under the cluster's

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *syncBuffer
}

// postgresBinDir finds the directory of initdb and postgres: Debian keeps
// them in /usr/lib/postgresql/<major>/bin, off PATH; the newest major wins.
func postgresBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(resolved), nil
		}
		return filepath.Dir(p), nil
	}
	return "", errors.New("no PostgreSQL server found (apt-get install -y postgresql; .ci/run installs it)")
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// newPostgres initializes a data directory under dir and picks a port.
func newPostgres(ctx context.Context, dir string) (*Postgres, error) {
	binDir, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	p := &Postgres{binDir: binDir, port: port}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, PostgreSQL needs an unprivileged user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// As another user, PostgreSQL's directory cannot be under dir, whose
	// parents may be private (a test's TempDir is 0700): it gets a temp
	// directory of its own, removed by Remove.
	pgRoot := dir
	if p.cred != nil {
		if pgRoot, err = os.MkdirTemp("", "trainq-postgres-"); err != nil {
			return nil, err
		}
		p.tmp = pgRoot
		if err := os.Chmod(pgRoot, 0o755); err != nil {
			return nil, err
		}
		_ = os.WriteFile(filepath.Join(dir, "postgres-dir"), []byte(pgRoot+"\n"), 0o644)
	}
	p.dataDir, p.sockDir = filepath.Join(pgRoot, "pgdata"), filepath.Join(pgRoot, "pgsock")
	for _, d := range []string{p.dataDir, p.sockDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		if p.cred != nil {
			if err := os.Chown(d, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	cmd := p.command(ctx, "initdb", "-D", p.dataDir, "-U", "temporal", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	return p, nil
}

func (p *Postgres) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(p.binDir, name), args...)
	cmd.Dir = "/"
	// Pdeathsig: a test binary that crashes takes its database with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Port is the TCP port on 127.0.0.1.
func (p *Postgres) Port() int { return p.port }

// Start starts the server on its data directory and waits until it accepts
// connections.
func (p *Postgres) Start(ctx context.Context) error {
	p.mu.Lock()
	if p.cmd != nil && !closed(p.done) {
		p.mu.Unlock()
		return errors.New("postgres is already running")
	}
	// Test settings: no fsync and no full-page writes, which only an OS crash
	// would need; enough connections for four services that reconnect. A
	// commit still waits for its WAL to reach the OS (synchronous_commit on,
	// the default), so that Crash loses nothing PostgreSQL acknowledged:
	// with synchronous_commit off it loses up to three wal_writer_delay of
	// acknowledged commits, which Temporal's services have already acted on
	// (TestPostgresCrashKeepsCommittedWrites).
	cmd := p.command(context.Background(), "postgres", "-D", p.dataDir, "-k", p.sockDir,
		"-h", "127.0.0.1", "-p", strconv.Itoa(p.port),
		"-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=64MB", "-c", "log_min_messages=warning")
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done, p.log = cmd, done, log
	p.mu.Unlock()
	for {
		out, err := p.command(ctx, "pg_isready", "-h", "127.0.0.1", "-p", strconv.Itoa(p.port), "-U", "temporal", "-d", "postgres").CombinedOutput()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("postgres exited while starting: %s", log.String())
		case <-ctx.Done():
			return fmt.Errorf("postgres is not ready: %v (%s) %s", ctx.Err(), out, log.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Crash stops the server as a crash would: SIGQUIT to the postmaster, which
// ends every backend at once without a checkpoint (pg_ctl stop -m
// immediate), so that the next start runs crash recovery. (SIGKILL of the
// postmaster alone would leave its backends holding the shared memory.)
func (p *Postgres) Crash() { p.signal(syscall.SIGQUIT) }

// Stop shuts the server down fast (SIGINT: connections are closed, then a
// checkpoint).
func (p *Postgres) Stop() { p.signal(syscall.SIGINT) }

func (p *Postgres) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || closed(done) {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// Remove deletes the data directory when it is a temp directory of its own
// (the server must be stopped).
func (p *Postgres) Remove() {
	if p.tmp != "" {
		_ = os.RemoveAll(p.tmp)
	}
}

// LogTail is the end of the server's output since its last start.
func (p *Postgres) LogTail(lines int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.log == nil {
		return ""
	}
	return tail(p.log.String(), lines)
}

func closed(c chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}
