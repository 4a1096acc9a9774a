package api

import (
	"context"
	"sync"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/workflows"
)

// fakeBackend stands in for Temporal where no server is needed: it records
// the jobs that would have started.
type fakeBackend struct {
	cfg  *config.Config
	mu   sync.Mutex
	jobs map[string]workflows.JobInfo
	subs int
}

func newFakeBackend(cfg *config.Config) *fakeBackend {
	return &fakeBackend{cfg: cfg, jobs: map[string]workflows.JobInfo{}}
}

func (f *fakeBackend) started() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.subs
}

func (f *fakeBackend) Submit(ctx context.Context, spec protocol.JobSpec, opts workflows.SubmitOptions) (workflows.Submission, error) {
	if _, err := workflows.Check(f.cfg, &spec); err != nil {
		return workflows.Submission{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name := opts.Name
	if name == "" {
		name = workflows.NewJobName(spec.Kind)
	}
	if _, ok := f.jobs[name]; !ok {
		f.subs++
		f.jobs[name] = workflows.JobInfo{JobName: name, Status: string(protocol.StatePending), Kind: string(spec.Kind),
			Author: spec.Author, Workspace: spec.Workspace, Running: true, RequestHash: opts.RequestHash}
	}
	return workflows.Submission{JobName: name, Status: string(protocol.StatePending)}, nil
}

func (f *fakeBackend) Describe(ctx context.Context, name string) (workflows.JobInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, ok := f.jobs[name]
	if !ok {
		return info, workflows.ErrJobNotFound
	}
	return info, nil
}

func (f *fakeBackend) Status(ctx context.Context, name string) (protocol.JobStatus, error) {
	info, err := f.Describe(ctx, name)
	return protocol.JobStatus{JobName: info.JobName, State: protocol.JobState(info.Status)}, err
}

func (f *fakeBackend) Cancel(ctx context.Context, name string) error {
	_, err := f.Describe(ctx, name)
	return err
}

func (f *fakeBackend) List(ctx context.Context, lf workflows.ListFilter) ([]workflows.JobSummary, error) {
	return nil, nil
}

func (f *fakeBackend) Count(ctx context.Context, lf workflows.ListFilter) (int64, error) {
	return 0, nil
}

func (f *fakeBackend) Queue(ctx context.Context, region, allocation string) (protocol.QueueView, error) {
	return protocol.QueueView{Region: region, Allocation: allocation}, nil
}

func (f *fakeBackend) Health(ctx context.Context) error { return nil }
