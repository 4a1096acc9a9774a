package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/workflows"
)

// Upgrades follow Temporal's Worker Deployment versioning:
//
//   - Every trainq-worker started with a build ID polls the task queue
//     "trainq" as version <build ID> of the Worker Deployment "trainq".
//   - A job workflow is pinned: it runs its whole life on the build it
//     started on, so a change to the job workflow never meets a running job.
//     Old workers keep serving until their pinned jobs have ended (the
//     version is drained).
//   - The allocator auto-upgrades: it runs for ever, so it moves to the
//     current version at its next workflow task. Every change to its code
//     therefore keeps old histories replaying (workflow.GetVersion), which
//     the recorded histories of every release prove in `go test`.
//   - Node agents run activities only, unversioned: they are upgraded node by
//     node, and every activity input decodes the payloads of older builds.
//
// Without a build ID everything runs unversioned, as for development.

// EnvBuildID names the environment variable that gives the build ID.
const EnvBuildID = "TRAINQ_BUILD_ID"

// DeploymentName is the Worker Deployment trainq's workflow workers join.
const DeploymentName = "trainq"

// validBuildID checks a build ID before anything starts.
func validBuildID(id string) error {
	switch {
	case id == "":
		return nil
	case len(id) > 255:
		return errors.New("--build-id: at most 255 characters")
	case strings.ContainsAny(id, " \t\n/"):
		return fmt.Errorf("--build-id %q: no spaces or slashes", id)
	}
	return nil
}

// WorkflowStallLimit is how long a workflow task may run without yielding
// before the SDK fails it as a deadlock. The SDK's default, one second, is
// below the allocator's own task timeout (protocol.AllocatorTaskTimeout): on a
// busy host, an allocator task that encoded a large snapshot for
// continue-as-new ran 1.6 s, was failed at one second and ran again, where
// the server would have accepted it. The server's task timeouts bound a slow
// task; this only has to catch a workflow that never yields, and still does.
const WorkflowStallLimit = 10 * time.Second

// mainWorkerOptions are the options of the worker on the task queue "trainq".
func mainWorkerOptions(buildID string) worker.Options {
	// More pollers than the default two: one allocator serves many jobs, and a
	// burst of submissions otherwise waits seconds for its first workflow task.
	o := worker.Options{MaxConcurrentWorkflowTaskPollers: 8, MaxConcurrentActivityTaskPollers: 8,
		// A task meant for a worker that died (kill -9) goes back to the
		// shared queue after this, instead of the default 5s: scheduling
		// resumes soon after a restart, at the price of a replay when a
		// live worker is this slow to take its own task.
		StickyScheduleToStartTimeout: 2 * time.Second,
		DeadlockDetectionTimeout:     WorkflowStallLimit}
	if buildID != "" {
		o.DeploymentOptions = worker.DeploymentOptions{
			UseVersioning: true,
			Version:       worker.WorkerDeploymentVersion{DeploymentName: DeploymentName, BuildID: buildID},
		}
	}
	return o
}

// allocatorWorkerOptions are the options of the allocators' worker: a few
// workflows, each busy, so the default pollers do; the same sticky timeout
// and deployment version as the main worker.
func allocatorWorkerOptions(buildID string) worker.Options {
	o := mainWorkerOptions(buildID)
	o.MaxConcurrentWorkflowTaskPollers, o.MaxConcurrentActivityTaskPollers = 2, 2
	return o
}

// registerAllocator registers the allocator workflow on the allocators' worker.
func registerAllocator(w worker.Worker, allocatorWorkflow any, versioned bool) {
	opts := workflow.RegisterOptions{Name: protocol.AllocatorWorkflowName}
	if versioned {
		opts.VersioningBehavior = workflow.VersioningBehaviorAutoUpgrade
	}
	w.RegisterWorkflowWithOptions(allocatorWorkflow, opts)
}

// registerWorkflows registers trainq's workflows with their versioning
// behaviours (which apply only to a versioned worker).
func registerWorkflows(w worker.Worker, jobWorkflow, allocatorWorkflow any, versioned bool) {
	jobOpts := workflow.RegisterOptions{Name: protocol.JobWorkflowName}
	allocOpts := workflow.RegisterOptions{Name: protocol.AllocatorWorkflowName}
	if versioned {
		jobOpts.VersioningBehavior = workflow.VersioningBehaviorPinned
		allocOpts.VersioningBehavior = workflow.VersioningBehaviorAutoUpgrade
	}
	w.RegisterWorkflowWithOptions(jobWorkflow, jobOpts)
	w.RegisterWorkflowWithOptions(allocatorWorkflow, allocOpts)
	// A log read is short and keeps no state: it may run on any build.
	logOpts := workflow.RegisterOptions{Name: protocol.ReadLogWorkflowName}
	if versioned {
		logOpts.VersioningBehavior = workflow.VersioningBehaviorAutoUpgrade
	}
	w.RegisterWorkflowWithOptions(workflows.ReadLogWorkflow, logOpts)
}

// adoptFirstVersion makes buildID the deployment's current version when the
// deployment has none yet (its first versioned start), so that a fresh
// install needs no manual step. An existing current version is left alone:
// moving to a new build is the operator's decision (docs/upgrading.md).
func adoptFirstVersion(ctx context.Context, c client.Client, buildID string, logger *slog.Logger) {
	h := c.WorkerDeploymentClient().GetHandle(DeploymentName)
	// The version exists once this worker's pollers have reached the server.
	for i := 0; i < 30; i++ {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		d, err := h.Describe(dctx, client.WorkerDeploymentDescribeOptions{})
		cancel()
		if err == nil {
			cur := d.Info.RoutingConfig.CurrentVersion
			if cur != nil && cur.BuildID != "" {
				if cur.BuildID != buildID {
					logger.Info("the deployment's current version is another build; this one serves only what is pinned or routed to it",
						"deployment", DeploymentName, "current", cur.BuildID, "build_id", buildID)
				}
				return
			}
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = h.SetCurrentVersion(sctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: buildID})
			cancel()
			if err == nil {
				logger.Info("made this build the deployment's first current version", "deployment", DeploymentName, "build_id", buildID)
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	logger.Warn("could not make this build the deployment's current version; run `temporal worker deployment set-current-version`",
		"deployment", DeploymentName, "build_id", buildID)
}

// buildIdentity names this worker's build for the allocator's hand-over on a
// new build (workflows.SetWorkerBuild): the build ID when versioned, else a
// checksum of the executable, so that a rebuilt binary counts as a new build
// and the same binary on many hosts as one. "" (never a new build) if the
// executable cannot be read.
func buildIdentity(buildID string, logger *slog.Logger) string {
	if buildID != "" {
		return buildID
	}
	exe, err := os.Executable()
	if err == nil {
		var f *os.File
		if f, err = os.Open(exe); err == nil {
			defer f.Close()
			h := sha256.New()
			if _, err = io.Copy(h, f); err == nil {
				return "sha256:" + hex.EncodeToString(h.Sum(nil))[:16]
			}
		}
	}
	logger.Warn("could not checksum the executable; allocators will not hand over on a new build of it", "error", err)
	return ""
}
