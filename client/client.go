package client

import (
	"context"
	"sync/atomic"

	commonpb "go.temporal.io/api/common/v1"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// Client is trainq's client: a Temporal connection, the configuration the
// jobs are checked against, and where workers' logs are read.
type Client struct {
	Temporal sdkclient.Client
	// Config is what Submit checks jobs against; reads (Status, List,
	// Queue, ...) work without it.
	Config *config.Config
	// Logs reads workers' logs; nil means the log files under
	// Config.DataDir (see LogSource).
	Logs LogSource
	// live, once SetConfig is called, replaces Config (a reloaded file).
	live atomic.Pointer[config.Config]
}

// SetConfig makes cfg the config later calls check against, safely while
// other calls run (trainq-api's config reload).
func (c *Client) SetConfig(cfg *config.Config) { c.live.Store(cfg) }

// config is the config calls check against: the last SetConfig's, else Config.
func (c *Client) config() *config.Config {
	if cfg := c.live.Load(); cfg != nil {
		return cfg
	}
	return c.Config
}

// New returns a client over an open Temporal connection.
func New(c sdkclient.Client, cfg *config.Config) *Client {
	return &Client{Temporal: c, Config: cfg}
}

// Jobs is what the REST API needs of trainq: *Client is the real one, and
// the API's tests put a fake in its place.
type Jobs interface {
	SubmitChecked(ctx context.Context, spec protocol.CheckedSpec, opts SubmitOptions) (Submission, error)
	Describe(ctx context.Context, name string) (JobInfo, error)
	Status(ctx context.Context, name string) (protocol.JobStatus, error)
	Cancel(ctx context.Context, name string) error
	Checkpoint(ctx context.Context, job string, attempt int, progress float64) (protocol.CheckpointReply, error)
	List(ctx context.Context, f ListFilter) ([]JobSummary, error)
	Count(ctx context.Context, f ListFilter) (int64, error)
	QueuePage(ctx context.Context, region, allocation string, page protocol.QueuePage) (protocol.QueueView, error)
	LogSource() (LogSource, error)
	Health(ctx context.Context) error
	DryRun(ctx context.Context, spec protocol.CheckedSpec) (DryRunAnswer, error)
	ExpectedStart(ctx context.Context, region, allocation, job string) (*scheduler.ExpectedStart, error)
}

var _ Jobs = (*Client)(nil)

// Health says whether Temporal answers.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.Temporal.CheckHealth(ctx, &sdkclient.CheckHealthRequest{})
	return err
}

// Close closes the Temporal connection.
func (c *Client) Close() { c.Temporal.Close() }

// answer decodes a query's answer into a T, once the query answered (the
// error first, then the decoding: no return list leans on the order Go reads
// its operands in).
func answer[T any](resp converter.EncodedValue, err error) (T, error) {
	var out T
	if err != nil {
		return out, err
	}
	err = resp.Get(&out)
	return out, err
}

func decodePayload(p *commonpb.Payload, v any) error {
	return converter.GetDefaultDataConverter().FromPayload(p, v)
}

// payloadString decodes the string stored under key k of a memo or of
// search attributes; a missing or odd value is "".
func payloadString(m map[string]*commonpb.Payload, k string) string {
	var s string
	if p, ok := m[k]; ok {
		_ = decodePayload(p, &s)
	}
	return s
}

// payloadInt is payloadString for integers.
func payloadInt(m map[string]*commonpb.Payload, k string) int64 {
	var n int64
	if p, ok := m[k]; ok {
		_ = decodePayload(p, &n)
	}
	return n
}
