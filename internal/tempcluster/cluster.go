// Package tempcluster starts a production-shaped Temporal cluster for
// trainq's tests and `make dev-cluster`: PostgreSQL (Debian's package) for
// persistence and SQL visibility, its schemas set up by temporal-sql-tool,
// several history shards, and the frontend, history, matching and worker
// services as four separate `temporal-server start --service=X` processes
// on loopback ports. Each service and PostgreSQL can be killed (kill -9, as
// a crash would) and started again on the same ports and state, on its own.
//
// The binaries come from tools/temporal-server/install.sh, which builds
// them from the Go module proxy into bin/temporal-server/ once per version.
package tempcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"google.golang.org/protobuf/types/known/durationpb"
	"sigs.k8s.io/yaml"

	"github.com/trainq/trainq/protocol"
)

// Version is the Temporal server version the cluster runs: the one the
// pinned CLI (v1.5.1) embeds in its dev server.
const Version = "v1.29.1"

// The four services, in the order they start.
const (
	Frontend = "frontend"
	History  = "history"
	Matching = "matching"
	Worker   = "worker"
)

// Services lists the services in start order.
var Services = []string{Frontend, History, Matching, Worker}

// Binaries are the cluster's programs and schema files.
type Binaries struct {
	Server, SQLTool, SchemaDir string
}

// FindBinaries looks for the cluster's binaries under root/bin/temporal-server
// (or $TRAINQ_TEMPORAL_SERVER_DIR). A missing one is an error that says how
// to build it.
func FindBinaries(root string) (Binaries, error) {
	dir := os.Getenv("TRAINQ_TEMPORAL_SERVER_DIR")
	if dir == "" {
		dir = filepath.Join(root, "bin", "temporal-server")
	}
	b := Binaries{
		Server:    filepath.Join(dir, "temporal-server-"+Version),
		SQLTool:   filepath.Join(dir, "temporal-sql-tool-"+Version),
		SchemaDir: filepath.Join(dir, "schema-"+Version),
	}
	for _, p := range []string{b.Server, b.SQLTool, b.SchemaDir} {
		if _, err := os.Stat(p); err != nil {
			return b, fmt.Errorf("%s is missing: run tools/temporal-server/install.sh (make cluster-bins)", p)
		}
	}
	return b, nil
}

// Options shape the cluster.
type Options struct {
	// Dir holds PostgreSQL's data, the server's config and the services' logs.
	Dir string
	// HistoryShards is numHistoryShards (default 4). It is fixed for the
	// life of the database, as on a real cluster.
	HistoryShards int
	// DynamicConfig is added to (and overrides) DefaultDynamicConfig.
	DynamicConfig map[string]any
	// LogLevel of the services (default "warn"); their logs are in Dir/logs.
	LogLevel string
	// Retention of the default namespace (default 3 days).
	Retention time.Duration
	// FrontendPort is the frontend's gRPC port on 127.0.0.1 (default: a free one).
	FrontendPort int
}

// DefaultDynamicConfig is what trainq's tests run the cluster with: the
// history task readers not rate-limited, as on trainq's dev server
// (protocol.DevServerDynamicConfig, here per shard), and no version check.
// Everything else is Temporal's default, as on a fresh production cluster.
func DefaultDynamicConfig() map[string]any {
	dc := map[string]any{"frontend.enableServerVersionCheck": false}
	for _, kv := range protocol.DevServerDynamicConfig {
		k, v, _ := strings.Cut(kv, "=")
		if n, err := strconv.Atoi(v); err == nil {
			dc[k] = n
		} else {
			dc[k] = v
		}
	}
	return dc
}

// Cluster is a running cluster.
type Cluster struct {
	bin      Binaries
	opts     Options
	pg       *Postgres
	ports    map[string][3]int // service -> grpc, membership, http (frontend only)
	services map[string]*service
}

type service struct {
	name    string
	logPath string
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
}

// Start builds a fresh cluster in opts.Dir: PostgreSQL, its two databases
// and their schemas, the server config, the frontend (then the default
// namespace and trainq's search attributes, before any history service
// caches what it knows of them), history, matching and worker; it returns
// once every service answers.
func Start(ctx context.Context, bin Binaries, opts Options) (_ *Cluster, err error) {
	if opts.HistoryShards == 0 {
		opts.HistoryShards = 4
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "warn"
	}
	if opts.Retention == 0 {
		opts.Retention = 72 * time.Hour
	}
	if err := os.MkdirAll(filepath.Join(opts.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, opts: opts, ports: map[string][3]int{}, services: map[string]*service{}}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if c.pg, err = newPostgres(ctx, opts.Dir); err != nil {
		return nil, err
	}
	if err = c.pg.Start(ctx); err != nil {
		return nil, err
	}
	if err = c.setupSchemas(ctx); err != nil {
		return nil, err
	}
	for _, s := range Services {
		var p [3]int
		for i := range p {
			if p[i], err = freeLowPort(); err != nil {
				return nil, err
			}
		}
		if s == Frontend && opts.FrontendPort != 0 {
			p[0] = opts.FrontendPort
		}
		c.ports[s] = p
		c.services[s] = &service{name: s, logPath: filepath.Join(opts.Dir, "logs", s+".log")}
	}
	if err = c.writeConfig(); err != nil {
		return nil, err
	}
	if err = c.StartService(ctx, Frontend); err != nil {
		return nil, err
	}
	if err = c.setupNamespace(ctx); err != nil {
		return nil, err
	}
	for _, s := range Services[1:] {
		if err = c.StartService(ctx, s); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// HostPort is the frontend's address.
func (c *Cluster) HostPort() string { return "127.0.0.1:" + strconv.Itoa(c.ports[Frontend][0]) }

// HTTPHostPort is the frontend's HTTP API address.
func (c *Cluster) HTTPHostPort() string { return "127.0.0.1:" + strconv.Itoa(c.ports[Frontend][2]) }

// Postgres is the cluster's database server.
func (c *Cluster) Postgres() *Postgres { return c.pg }

// Dir is the cluster's directory.
func (c *Cluster) Dir() string { return c.opts.Dir }

// Shards is numHistoryShards.
func (c *Cluster) Shards() int { return c.opts.HistoryShards }

func (c *Cluster) sqlTool(ctx context.Context, db string, args ...string) error {
	base := []string{"--plugin", "postgres12", "--ep", "127.0.0.1", "-p", strconv.Itoa(c.pg.Port()),
		"-u", "temporal", "--pw", "temporal", "--db", db}
	cmd := exec.CommandContext(ctx, c.bin.SQLTool, append(base, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("temporal-sql-tool %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// setupSchemas creates the persistence and visibility databases and brings
// each to the newest schema version of the server's module, as an operator
// does with temporal-sql-tool (the Helm chart's schema job does the same).
func (c *Cluster) setupSchemas(ctx context.Context) error {
	for db, schema := range map[string]string{"temporal": "temporal", "temporal_visibility": "visibility"} {
		if err := c.sqlTool(ctx, db, "create-database"); err != nil {
			return err
		}
		if err := c.sqlTool(ctx, db, "setup-schema", "-v", "0.0"); err != nil {
			return err
		}
		if err := c.sqlTool(ctx, db, "update-schema", "-d", filepath.Join(c.bin.SchemaDir, "postgresql", "v12", schema, "versioned")); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) writeConfig() error {
	store := func(db string, conns int) map[string]any {
		return map[string]any{"sql": map[string]any{
			"pluginName": "postgres12", "databaseName": db,
			"connectAddr": "127.0.0.1:" + strconv.Itoa(c.pg.Port()), "connectProtocol": "tcp",
			"user": "temporal", "password": "temporal",
			"maxConns": conns, "maxIdleConns": conns, "maxConnLifetime": "1h",
		}}
	}
	services := map[string]any{}
	for _, s := range Services {
		p := c.ports[s]
		rpc := map[string]any{"grpcPort": p[0], "membershipPort": p[1], "bindOnLocalHost": true}
		if s == Frontend {
			rpc["httpPort"] = p[2]
		}
		services[s] = map[string]any{"rpc": rpc}
	}
	cfg := map[string]any{
		"log": map[string]any{"stdout": true, "level": c.opts.LogLevel},
		"persistence": map[string]any{
			"defaultStore": "default", "visibilityStore": "visibility",
			"numHistoryShards": c.opts.HistoryShards,
			"datastores": map[string]any{
				"default":    store("temporal", 20),
				"visibility": store("temporal_visibility", 10),
			},
		},
		"global": map[string]any{
			"membership": map[string]any{"maxJoinDuration": "30s", "broadcastAddress": "127.0.0.1"},
		},
		"services": services,
		"clusterMetadata": map[string]any{
			"enableGlobalNamespace":    false,
			"failoverVersionIncrement": 10,
			"masterClusterName":        "active",
			"currentClusterName":       "active",
			"clusterInformation": map[string]any{"active": map[string]any{
				"enabled": true, "initialFailoverVersion": 1, "rpcName": "frontend", "rpcAddress": c.HostPort(),
				"httpAddress": c.HTTPHostPort(),
			}},
		},
		"dcRedirectionPolicy": map[string]any{"policy": "noop"},
		"dynamicConfigClient": map[string]any{"filepath": filepath.Join(c.opts.Dir, "config", "dynamicconfig.yaml"), "pollInterval": "10s"},
	}
	dc := DefaultDynamicConfig()
	for k, v := range c.opts.DynamicConfig {
		dc[k] = v
	}
	dcFile := map[string]any{}
	for k, v := range dc {
		dcFile[k] = []any{map[string]any{"value": v, "constraints": map[string]any{}}}
	}
	if err := os.MkdirAll(filepath.Join(c.opts.Dir, "config"), 0o755); err != nil {
		return err
	}
	for name, v := range map[string]any{"development.yaml": cfg, "dynamicconfig.yaml": dcFile} {
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(c.opts.Dir, "config", name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Client dials the frontend.
func (c *Cluster) Client(ctx context.Context) (client.Client, error) {
	return client.DialContext(ctx, client.Options{HostPort: c.HostPort(),
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
}

// setupNamespace registers the default namespace and trainq's search
// attributes (SQL visibility keeps them per namespace), retrying while the
// frontend's namespace cache has not seen the new namespace yet.
func (c *Cluster) setupNamespace(ctx context.Context) error {
	cl, err := c.Client(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	_, err = cl.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: client.DefaultNamespace, WorkflowExecutionRetentionPeriod: durationpb.New(c.opts.Retention),
	})
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("register the default namespace: %w", err)
	}
	req := &operatorservice.AddSearchAttributesRequest{Namespace: client.DefaultNamespace, SearchAttributes: map[string]enumspb.IndexedValueType{}}
	for _, sa := range protocol.SearchAttributeTypes {
		req.SearchAttributes[sa.Name] = sa.Type
	}
	for {
		_, err = cl.OperatorService().AddSearchAttributes(ctx, req)
		var exists *serviceerror.AlreadyExists
		if err == nil || errors.As(err, &exists) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("register trainq's search attributes: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
	// Wait until a visibility query on every one of them is accepted: the
	// frontend maps them to their columns through its namespace cache,
	// refreshed every 10 s (system.namespaceCacheRefreshInterval), which
	// lists them (ListSearchAttributes reads the database) before it maps
	// them; a start meanwhile is refused ("no mapping defined"). The other
	// services start after this, with the mapping.
	var terms []string
	for _, sa := range protocol.SearchAttributeTypes {
		if sa.Type == enumspb.INDEXED_VALUE_TYPE_INT {
			terms = append(terms, sa.Name+" = 0")
		} else {
			terms = append(terms, sa.Name+" = 'tempcluster-probe'")
		}
	}
	query := strings.Join(terms, " AND ")
	for {
		_, err := cl.WorkflowService().CountWorkflowExecutions(ctx, &workflowservice.CountWorkflowExecutionsRequest{
			Namespace: client.DefaultNamespace, Query: query})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("trainq's search attributes are not listed: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// StartService starts one service on its ports and waits until it answers
// (see ready). Starting a running service is an error.
func (c *Cluster) StartService(ctx context.Context, name string) error {
	s, ok := c.services[name]
	if !ok {
		return fmt.Errorf("no service %q", name)
	}
	s.mu.Lock()
	if s.cmd != nil && !closed(s.done) {
		s.mu.Unlock()
		return fmt.Errorf("%s is already running", name)
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	_, _ = fmt.Fprintf(logf, "=== start %s at %s\n", name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.bin.Server, "--root", c.opts.Dir, "--config", "config", "--env", "development",
		"--allow-no-auth", "start", "--service", name)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig: a test binary that crashes takes its services with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		s.mu.Unlock()
		return fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(done) }()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return c.ready(ctx, name, done)
}

// ready waits until the service answers: its gRPC port accepts (the
// worker service's membership port: it serves no gRPC), and then,
// through the frontend, the frontend answers GetSystemInfo, history answers
// DescribeWorkflowExecution for workflows on every shard (NotFound is an
// answer), matching answers DescribeTaskQueue.
func (c *Cluster) ready(ctx context.Context, name string, done <-chan struct{}) error {
	var last error
	for {
		last = c.probe(ctx, name)
		if last == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited while starting: %s", name, c.LogTail(name, 30))
		case <-ctx.Done():
			return fmt.Errorf("%s is not ready: %v (last error: %v)\n%s", name, ctx.Err(), last, c.LogTail(name, 30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cluster) probe(ctx context.Context, name string) error {
	port := c.ports[name][0]
	if name == Worker {
		// The worker service serves no gRPC: it is up once it has joined
		// the membership ring, whose port it listens on.
		port = c.ports[name][1]
	}
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return err
	}
	_ = conn.Close()
	if name == Worker {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cl, err := c.Client(pctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	ws := cl.WorkflowService()
	switch name {
	case Frontend:
		_, err = ws.GetSystemInfo(pctx, &workflowservice.GetSystemInfoRequest{})
	case History:
		for i := 0; i < 8*c.opts.HistoryShards && err == nil; i++ {
			_, err = cl.DescribeWorkflow(pctx, "tempcluster-probe-"+strconv.Itoa(i), "")
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				err = nil
			}
		}
	case Matching:
		_, err = ws.DescribeTaskQueue(pctx, &workflowservice.DescribeTaskQueueRequest{Namespace: client.DefaultNamespace,
			TaskQueue: &taskqueue.TaskQueue{Name: "tempcluster-probe", Kind: enumspb.TASK_QUEUE_KIND_NORMAL}})
	}
	return err
}

// Kill ends a service with SIGKILL, as a crash would, and waits for it.
func (c *Cluster) Kill(name string) { c.signal(name, syscall.SIGKILL) }

// Restart kills a service (kill -9) and starts it again on its ports.
func (c *Cluster) Restart(ctx context.Context, name string) error {
	c.Kill(name)
	return c.StartService(ctx, name)
}

// RestartPostgres crashes PostgreSQL (every backend at once, no checkpoint)
// and starts it again on its data; the services reconnect by themselves.
func (c *Cluster) RestartPostgres(ctx context.Context) error {
	c.pg.Crash()
	return c.pg.Start(ctx)
}

func (c *Cluster) signal(name string, sig syscall.Signal) {
	s := c.services[name]
	if s == nil {
		return
	}
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil || closed(done) {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	if sig != syscall.SIGKILL {
		select {
		case <-done:
			return
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	<-done
}

// Stop ends every service (SIGTERM, SIGKILL after 10 s) and PostgreSQL,
// and removes PostgreSQL's data when it is outside Dir (see newPostgres).
func (c *Cluster) Stop() {
	for i := len(Services) - 1; i >= 0; i-- {
		c.signal(Services[i], syscall.SIGTERM)
	}
	if c.pg != nil {
		c.pg.Stop()
		c.pg.Remove()
	}
}

// LogTail is the end of a service's log file.
func (c *Cluster) LogTail(name string, lines int) string {
	s := c.services[name]
	if s == nil {
		return ""
	}
	b, _ := os.ReadFile(s.logPath)
	return tail(string(b), lines)
}

// Pid is the process id of a running service (0 when stopped).
func (c *Cluster) Pid(name string) int {
	s := c.services[name]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || closed(s.done) {
		return 0
	}
	return s.cmd.Process.Pid
}
