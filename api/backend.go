package api

import (
	"context"

	"go.temporal.io/sdk/client"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/workflows"
)

// Backend is what the handlers need from Temporal. The server uses
// Temporal; the fuzz test uses a fake that records what would have started.
type Backend interface {
	Submit(ctx context.Context, spec protocol.JobSpec, opts workflows.SubmitOptions) (workflows.Submission, error)
	Describe(ctx context.Context, name string) (workflows.JobInfo, error)
	Status(ctx context.Context, name string) (protocol.JobStatus, error)
	Cancel(ctx context.Context, name string) error
	List(ctx context.Context, f workflows.ListFilter) ([]workflows.JobSummary, error)
	Count(ctx context.Context, f workflows.ListFilter) (int64, error)
	Queue(ctx context.Context, region, allocation string) (protocol.QueueView, error)
	Health(ctx context.Context) error
}

// TemporalBackend is the Backend of a running server.
type TemporalBackend struct {
	Client client.Client
	Config *config.Config
}

var _ Backend = TemporalBackend{}

func (b TemporalBackend) Submit(ctx context.Context, spec protocol.JobSpec, opts workflows.SubmitOptions) (workflows.Submission, error) {
	return workflows.SubmitWith(ctx, b.Client, b.Config, spec, opts)
}

func (b TemporalBackend) Describe(ctx context.Context, name string) (workflows.JobInfo, error) {
	return workflows.Describe(ctx, b.Client, name)
}

func (b TemporalBackend) Status(ctx context.Context, name string) (protocol.JobStatus, error) {
	return workflows.Status(ctx, b.Client, name)
}

func (b TemporalBackend) Cancel(ctx context.Context, name string) error {
	return workflows.Cancel(ctx, b.Client, name)
}

func (b TemporalBackend) List(ctx context.Context, f workflows.ListFilter) ([]workflows.JobSummary, error) {
	return workflows.List(ctx, b.Client, f)
}

func (b TemporalBackend) Count(ctx context.Context, f workflows.ListFilter) (int64, error) {
	return workflows.Count(ctx, b.Client, f)
}

func (b TemporalBackend) Queue(ctx context.Context, region, allocation string) (protocol.QueueView, error) {
	return workflows.Queue(ctx, b.Client, region, allocation)
}

func (b TemporalBackend) Health(ctx context.Context) error {
	_, err := b.Client.CheckHealth(ctx, &client.CheckHealthRequest{})
	return err
}
