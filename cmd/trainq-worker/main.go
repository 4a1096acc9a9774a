// Command trainq-worker runs trainq's workflows and activities: the job and
// allocator workflows on the main task queue, and one node agent per
// configured node, each on that node's task queue. It also makes sure every
// configured allocation has a running allocator, and serves Prometheus
// metrics on the config's metrics_addr (see package metrics).
//
// The two halves may run apart, as on a real cluster where each GPU server
// runs the agent of its own node:
//
//	trainq-worker [--config FILE]                 workflows and every node agent
//	trainq-worker --agents=false [--config FILE]  workflows and control activities only
//	trainq-worker agent --node NAME [--node NAME ...] [--config FILE]
//	trainq-worker agent --nodes-from-host [--config FILE]
//	trainq-worker supervise DIR   (internal: the parent of one worker's processes)
//	trainq-worker dev-server-args (internal: the flags of trainq's Temporal dev server, one a line)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/trainq/trainq/activities"
	trainq "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/cluster/local"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/metrics"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/workflows"
)

func main() {
	if len(os.Args) >= 3 && os.Args[1] == "supervise" {
		os.Exit(local.Supervise(os.Args[2]))
	}
	if len(os.Args) == 2 && os.Args[1] == "dev-server-args" {
		// scripts/dev.sh starts its dev server with these, so that they are
		// written down once (protocol.DevServerArgs), for tests and make dev.
		for _, a := range protocol.DevServerArgs() {
			fmt.Println(a)
		}
		return
	}
	opts, err := parseArgs(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		fmt.Print(usage)
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "trainq-worker: "+sentence(err.Error()))
		os.Exit(2)
	}
	if err := run(opts); err != nil {
		fmt.Fprintln(os.Stderr, "trainq-worker:", err)
		os.Exit(1)
	}
}

// sentence ends a message with a full stop.
func sentence(s string) string {
	if s == "" || s[len(s)-1] == '.' {
		return s
	}
	return s + "."
}

func run(opts options) error {
	cfg, err := config.Load(opts.configPath)
	if err != nil {
		return err
	}
	nodes, err := nodesOf(cfg, opts)
	if err != nil {
		return err
	}
	runsWorkflows := opts.role != roleAgent
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("role", opts.role.String())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	c, reg, disconnect, err := connect(ctx, logger)
	if err != nil {
		return err
	}
	defer disconnect()
	stopMetrics, err := startMetrics(opts, cfg, c, reg, logger)
	if err != nil {
		return err
	}
	defer stopMetrics()

	if runsWorkflows {
		if err := ensureSearchAttributes(ctx, c); err != nil {
			return err
		}
	}
	backend, closeBackend, err := newBackend(ctx, cfg, c, logger)
	if err != nil {
		return err
	}
	defer closeBackend()
	if opts.role == roleAll {
		nodes = cfg.Nodes() // with the nodes node_selector picked
	}
	acts := &activities.Activities{Client: c, Config: cfg, Backend: backend, Estimates: &activities.EstimateCache{}}
	if acts.TestListingLag, err = activities.ListingLagFromEnv(); err != nil {
		return err
	}
	if acts.TestListingLag > 0 {
		logger.Warn("test-only: recovery's job listing lags (leaves out jobs started within the lag)",
			"env", activities.EnvTestListingLag, "lag", acts.TestListingLag.String())
	}
	for _, w := range newWorkers(ctx, c, opts, nodes, acts, backend, logger) {
		if err := w.Start(); err != nil {
			return err
		}
		defer w.Stop()
	}
	if runsWorkflows && opts.buildID != "" {
		adoptFirstVersion(ctx, c, opts.buildID, logger)
	}
	if runsWorkflows {
		if err := ensureAllocators(ctx, c, cfg, logger); err != nil {
			return err
		}
		go keepAllocatorsRunning(ctx, c, cfg, cfg.ReclaimInterval.D(), logger)
	}
	if kb, ok := backend.(*kube.Backend); ok && opts.role == roleAll {
		go followSelectors(ctx, c, cfg, kb, acts, nodes, logger)
	}
	logRunning(logger, opts, cfg, nodes)
	<-ctx.Done()
	logger.Info("trainq-worker is stopping; running jobs keep running and are re-attached at the next start")
	return nil
}

// connect makes the metrics registry and dials Temporal; the SDK's own
// metrics and those the workflows emit feed the registry (/metrics).
func connect(ctx context.Context, logger *slog.Logger) (client.Client, *metrics.Registry, func(), error) {
	reg, err := metrics.NewRegistry()
	if err != nil {
		return nil, nil, nil, err
	}
	shutdown := func() { _ = reg.Shutdown(context.Background()) }
	copts, err := trainq.ClientOptions(sdklog.NewStructuredLogger(logger))
	if err != nil {
		shutdown()
		return nil, nil, nil, err
	}
	copts.MetricsHandler = reg.Handler
	c, err := trainq.DialOptions(ctx, copts)
	if err != nil {
		shutdown()
		return nil, nil, nil, err
	}
	return c, reg, func() { c.Close(); shutdown() }, nil
}

// nodesOf says the nodes whose agents this process runs.
func nodesOf(cfg *config.Config, opts options) ([]string, error) {
	switch opts.role {
	case roleAll:
		return cfg.Nodes(), nil
	case roleAgent:
		host := ""
		if opts.nodesFromHost {
			var err error
			if host, err = os.Hostname(); err != nil {
				return nil, fmt.Errorf("agent: --nodes-from-host: cannot read the hostname: %w", err)
			}
		}
		nodes, err := agentNodes(cfg, opts.nodes, opts.nodesFromHost, host)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		return nodes, nil
	}
	return nil, nil
}

// startMetrics registers the queue collector (workflow roles) and serves
// /metrics where asked; stop ends serving.
func startMetrics(opts options, cfg *config.Config, c client.Client, reg *metrics.Registry, logger *slog.Logger) (stop func(), err error) {
	runsWorkflows := opts.role != roleAgent
	metricsAddr := opts.metricsAddr // an agent serves metrics only when asked to
	if runsWorkflows {
		metricsAddr = cfg.MetricsAddr
		var allocations []metrics.Allocation
		for _, ref := range cfg.Allocations() {
			allocations = append(allocations, metrics.Allocation{Region: ref.Region, Allocation: ref.Allocation.Name})
		}
		reg.Prometheus.MustRegister(metrics.NewCollector(allocations, func(ctx context.Context, region, allocation string) (protocol.QueueView, error) {
			return trainq.New(c, cfg).Queue(ctx, region, allocation)
		}))
	}
	if metricsAddr == "" {
		return func() {}, nil
	}
	stop, err = serveMetrics(metricsAddr, reg, logger)
	if err != nil && !runsWorkflows {
		return nil, fmt.Errorf("agent: --metrics-addr %s: %w", metricsAddr, errors.Unwrap(err))
	}
	return stop, err
}

// newWorkers builds the Temporal workers of this process's role: the main
// and allocator queues for the workflow roles, one node agent per node.
// Kubernetes agents start on their own (they answer only while their node
// is Ready).
func newWorkers(ctx context.Context, c client.Client, opts options, nodes []string, acts *activities.Activities,
	backend cluster.Backend, logger *slog.Logger) []worker.Worker {
	var workers []worker.Worker
	if opts.role != roleAgent {
		workflows.SetWorkerBuild(buildIdentity(opts.buildID, logger))
		main := worker.New(c, protocol.TaskQueue, mainWorkerOptions(opts.buildID))
		// The main queue keeps the allocator too: a run started before the
		// allocators had a queue of their own moves over at its next
		// continue-as-new.
		registerWorkflows(main, workflows.JobWorkflow, workflows.AllocatorWorkflow, opts.buildID != "")
		main.RegisterActivity(acts)
		alloc := worker.New(c, protocol.AllocatorTaskQueue, allocatorWorkerOptions(opts.buildID))
		registerAllocator(alloc, workflows.AllocatorWorkflow, opts.buildID != "")
		alloc.RegisterActivity(acts) // the allocator's own activities run on its queue
		workers = append(workers, main, alloc)
	}
	// On a real cluster each GPU server runs its own agent (trainq-worker
	// agent); by default one process serves every node of the config.
	for _, node := range nodes {
		if kb, ok := backend.(*kube.Backend); ok {
			go runKubeAgent(ctx, c, node, acts, kb, logger)
			continue
		}
		w := worker.New(c, protocol.NodeTaskQueue(node), nodeAgentOptions())
		w.RegisterActivity(acts)
		workers = append(workers, w)
	}
	return workers
}

// nodeAgentOptions are the worker options of one node's agent: activities
// only, with one poller. A node's activities are few (a start, a watch and a
// stop per worker; the watch holds an execution slot, not a poller), while
// every poller counts against the namespace's limit on concurrent polls
// (frontend.namespaceCount, 1,200 by default): with the SDK's defaults, a
// thousand nodes' agents would pass it and starve every other worker.
func nodeAgentOptions() worker.Options {
	return worker.Options{DisableWorkflowWorker: true, MaxConcurrentActivityTaskPollers: 1}
}

func logRunning(logger *slog.Logger, opts options, cfg *config.Config, nodes []string) {
	switch opts.role {
	case roleAll:
		logger.Info("trainq-worker is running: workflows and the node agents of every configured node",
			"config", cfg.Source(), "nodes", len(nodes), "data_dir", cfg.DataDir)
	case roleWorkflows:
		logger.Info("trainq-worker is running: workflows and control activities only; the node agents run apart (trainq-worker agent)",
			"config", cfg.Source(), "task_queue", protocol.TaskQueue, "data_dir", cfg.DataDir)
	case roleAgent:
		logger.Info("trainq-worker is running: node agents only",
			"config", cfg.Source(), "nodes", nodes, "data_dir", cfg.DataDir)
	}
}

// serveMetrics serves /metrics on addr until the returned stop is called.
func serveMetrics(addr string, reg *metrics.Registry, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics_addr %s: %w (set metrics_addr: \"\" in the config to serve no metrics)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", reg.HTTPHandler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics server stopped", "error", err)
		}
	}()
	logger.Info("serving Prometheus metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// ensureSearchAttributes registers trainq's search attributes if the server
// lacks them, so that a fresh server needs no manual step.
func ensureSearchAttributes(ctx context.Context, c client.Client) error {
	ns := trainq.Namespace()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	have, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return fmt.Errorf("cannot list search attributes on namespace %s: %w", ns, err)
	}
	req := &operatorservice.AddSearchAttributesRequest{Namespace: ns, SearchAttributes: map[string]enumspb.IndexedValueType{}}
	for _, sa := range protocol.SearchAttributeTypes {
		if _, ok := have.GetCustomAttributes()[sa.Name]; !ok {
			req.SearchAttributes[sa.Name] = sa.Type
		}
	}
	if len(req.SearchAttributes) == 0 {
		return nil
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, req)
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("cannot register search attributes: %w", err)
	}
	return nil
}

// ensureAllocators starts the allocator of every configured allocation, or
// finds it running and hands it the current config (see reconfigureAllocator).
func ensureAllocators(ctx context.Context, c client.Client, cfg *config.Config, logger *slog.Logger) error {
	for _, ref := range cfg.Allocations() {
		in, err := cfg.AllocatorInput(ref.Region, ref.Allocation.Name)
		if err != nil {
			return err
		}
		if _, err := c.ExecuteWorkflow(ctx, protocol.AllocatorStartOptions(ref.Region, ref.Allocation.Name), protocol.AllocatorWorkflowName, in); err != nil {
			return fmt.Errorf("cannot start the allocator of %s/%s: %w", ref.Region, ref.Allocation.Name, err)
		}
		// A fresh allocator takes the config only once it has recovered
		// its state (seconds); one allocation must not hold up the next.
		go reconfigureAllocator(ctx, c, in, logger)
	}
	return nil
}

// reconfigureTimeout bounds the wait for a running allocator to take the config.
const reconfigureTimeout = 30 * time.Second

// reconfigureAllocator sends the config to a running allocator, which
// applies what changed (nodes, queueing, min_runtime_before_preemption,
// stop_grace_period, reclaim_interval). An allocator this worker just
// started already has it: the update is then a no-op. A config the
// allocator refuses (it removes or changes a node a job is placed on) is
// logged with the reason and the worker starts anyway: the allocator keeps
// its current config.
//
// It says whether the allocator now has the config.
func reconfigureAllocator(ctx context.Context, c client.Client, in protocol.AllocatorInput, logger *slog.Logger) bool {
	name := in.Region + "/" + in.Allocation
	ctx, cancel := context.WithTimeout(ctx, reconfigureTimeout)
	defer cancel()
	handle, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   protocol.AllocatorWorkflowID(in.Region, in.Allocation),
		UpdateName:   protocol.UpdateReconfigure,
		Args:         []any{in},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var reply protocol.ReconfigureReply
	if err == nil {
		err = handle.Get(ctx, &reply)
	}
	var appErr *temporal.ApplicationError
	switch {
	case errors.As(err, &appErr):
		logger.Warn("the allocator refused the changed config and keeps its current one; stop the jobs named or fix the config, then restart trainq-worker",
			"allocation", name, "reason", appErr.Message())
		return false
	case err != nil:
		logger.Warn("could not hand the config to the running allocator; it keeps its current one until the next start",
			"allocation", name, "error", err)
		return false
	case reply.Changed:
		logger.Info("allocator reconfigured", "allocation", name, "changes", reply.Summary, "refused_jobs", reply.Refused)
	}
	return true
}
