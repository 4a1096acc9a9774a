package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"

	"github.com/trainq/trainq/activities"
	trainq "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/cluster/kube"
	"github.com/trainq/trainq/cluster/local"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// newBackend returns the cluster backend the config names, and what closes it.
func newBackend(ctx context.Context, cfg *config.Config, c client.Client, logger *slog.Logger) (cluster.Backend, func(), error) {
	if cfg.Backend != config.BackendKubernetes {
		b, err := local.New(local.Options{DataDir: cfg.DataDir})
		return b, func() {}, err
	}
	k := cfg.Kubernetes
	cs, err := kube.NewClient(k.Kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	b, err := kube.New(sctx, kube.Options{
		Client: cs, Namespace: k.Namespace, ImagePullSecrets: k.ImagePullSecrets,
		TerminationGracePeriod: k.TerminationGracePeriod.D(), DefaultImage: k.DefaultImage,
		ServiceAccount: k.ServiceAccount, ImagePullTimeout: k.ImagePullTimeout.D(), UnknownTimeout: cfg.NodeTimeout.D(),
		Jobs: temporalJobs{c: c}, Logger: logger.With("backend", "kubernetes"), KeepFinished: k.KeepFinished.D(),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("backend kubernetes (namespace %s): %w", k.Namespace, err)
	}
	applySelectors(cfg, b, logger)
	return b, b.Close, nil
}

// temporalJobs tells the Kubernetes backend about jobs from their workflows.
type temporalJobs struct{ c client.Client }

func (j temporalJobs) Meta(ctx context.Context, job string) (kube.JobMeta, error) {
	resp, err := j.c.DescribeWorkflow(ctx, job, "")
	if err != nil {
		return kube.JobMeta{}, err
	}
	e := resp.RawResponse.GetWorkflowExecutionInfo()
	dc := converter.GetDefaultDataConverter()
	var m kube.JobMeta
	var kind string
	if p, ok := e.GetSearchAttributes().GetIndexedFields()[protocol.SAPriority]; ok {
		_ = dc.FromPayload(p, &m.PriorityClass)
	}
	if p, ok := e.GetSearchAttributes().GetIndexedFields()[protocol.SAKind]; ok {
		_ = dc.FromPayload(p, &kind)
	}
	if p, ok := e.GetMemo().GetFields()[trainq.MemoInstanceType]; ok {
		_ = dc.FromPayload(p, &m.InstanceType)
	}
	m.Notebook = kind == string(scheduler.KindNotebook)
	return m, nil
}

func (j temporalJobs) Ended(ctx context.Context, job string) (bool, error) {
	resp, err := j.c.DescribeWorkflow(ctx, job, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return resp.RawResponse.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}

func (j temporalJobs) StopReason(ctx context.Context, id cluster.WorkerID) (string, string, error) {
	st, err := trainq.New(j.c, nil).Status(ctx, id.Job)
	if err != nil {
		return "", "", err
	}
	for _, a := range st.Attempts {
		if a.Number != id.Attempt {
			continue
		}
		pre := ""
		if a.Preemptor != nil {
			pre = a.Preemptor.Job
		}
		return a.EndReason, pre, nil
	}
	return "", "", nil
}

// runKubeAgent runs the agent of node while the Kubernetes node is Ready,
// and stops it while it is not: a node whose kubelet is gone then looks,
// to the workflows, like a node whose agent is gone, and its jobs end as
// node losses after node_timeout and rerun elsewhere. When the node is back,
// the agent answers again and the allocator fences the node (stops the pods
// that nobody holds) before it grants its GPUs.
func runKubeAgent(ctx context.Context, c client.Client, node string, acts *activities.Activities, b *kube.Backend, logger *slog.Logger) {
	changes, unsubscribe := b.NodeChanges()
	defer unsubscribe()
	var w worker.Worker
	stop := func() {
		if w != nil {
			w.Stop()
			w = nil
		}
	}
	defer stop()
	wasReady := true
	for {
		ready, why := b.NodeReady(node)
		switch {
		case ready && w == nil:
			opts := nodeAgentOptions()
			opts.WorkerStopTimeout = 10 * time.Second
			w = worker.New(c, protocol.NodeTaskQueue(node), opts)
			w.RegisterActivity(acts)
			if err := w.Start(); err != nil {
				logger.Error("cannot start the node agent", "node", node, "error", err)
				w = nil
			} else if !wasReady {
				logger.Info("node is Ready again: its agent answers", "node", node)
			}
		case !ready && (w != nil || wasReady):
			logger.Warn("Kubernetes node "+why+"; its agent stops answering, so its jobs end as node losses after node_timeout", "node", node)
			stop()
		}
		wasReady = ready
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
	}
}
