package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// explainingClient answers the allocator's explain query with where and
// records the capacity requests signalled to it.
type explainingClient struct {
	client.Client
	where protocol.ExplainReply
	sent  []protocol.CapacityRequest
}

type jsonValue struct{ v any }

func (j jsonValue) HasValue() bool { return true }

func (j jsonValue) Get(ptr any) error {
	b, err := json.Marshal(j.v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, ptr)
}

func (c *explainingClient) QueryWorkflow(context.Context, string, string, string, ...any) (converter.EncodedValue, error) {
	return jsonValue{c.where}, nil
}

// UpdateWorkflow takes the request as the allocator would, and answers where it stands.
func (c *explainingClient) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	if o.UpdateName != protocol.UpdateRequest {
		return nil, fmt.Errorf("unexpected update %q", o.UpdateName)
	}
	req := o.Args[0].(protocol.CapacityRequest)
	c.sent = append(c.sent, req)
	return answeredUpdate{protocol.CapacityReply{Position: 1}}, nil
}

type answeredUpdate struct{ reply protocol.CapacityReply }

func (u answeredUpdate) WorkflowID() string { return "" }
func (u answeredUpdate) RunID() string      { return "" }
func (u answeredUpdate) UpdateID() string   { return "" }
func (u answeredUpdate) Get(_ context.Context, ptr any) error {
	*ptr.(*protocol.CapacityReply) = u.reply
	return nil
}

func (c *explainingClient) SignalWithStartWorkflow(_ context.Context, _ string, signal string, arg any, _ client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	if signal == protocol.SignalRequest {
		c.sent = append(c.sent, arg.(protocol.CapacityRequest))
	}
	return nil, nil
}

// TestCheckRequestAsksAgainForAGrantTheJobNeverTook: a waiting job checks its
// request. Waiting in the allocator's queue: nothing is sent. Unknown, or
// granted (the job, which checks only while it waits, never saw that grant: it
// went to a run a reset replaced): the request is sent again, so that the
// allocator sends the grant again or, releasing that attempt, reclaims it and
// has the job rerun (allocation.State.ForgottenAnswered).
func TestCheckRequestAsksAgainForAGrantTheJobNeverTook(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trainq.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
data_dir: `+t.TempDir()+`
default_region: T
default_allocation: a
regions:
  - name: T
    allocations:
      - name: a
        nodes:
          - {name: a-1, family: a100, gpus: 2, cpu: 16, ram_gb: 128}
`), 0o600))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	req := fixture.Request{Job: "j", Attempt: 2, Class: scheduler.Medium, Workers: 1}.Capacity()
	in := RequestCapacityInput{Region: "T", Allocation: "a", Request: req}
	for _, c := range []struct {
		name   string
		where  protocol.ExplainReply
		resent bool
	}{
		{"waiting: known, nothing sent", protocol.ExplainReply{Waiting: &scheduler.WaitingInfo{Attempt: 2}}, false},
		{"unknown: sent again", protocol.ExplainReply{}, true},
		{"another attempt waiting: sent again", protocol.ExplainReply{Waiting: &scheduler.WaitingInfo{Attempt: 1}}, true},
		{"granted, never taken: sent again", protocol.ExplainReply{Running: &scheduler.RunningInfo{Attempt: 2}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := &explainingClient{where: c.where}
			a := &Activities{Client: fake, Config: cfg}
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestActivityEnvironment()
			env.RegisterActivity(a.CheckRequest)
			v, err := env.ExecuteActivity(a.CheckRequest, in)
			require.NoError(t, err)
			var check RequestCheck
			require.NoError(t, v.Get(&check))
			assert.Equal(t, c.resent, check.Resent)
			assert.Equal(t, !c.resent, check.Known)
			if c.resent {
				require.Len(t, fake.sent, 1)
				assert.Equal(t, 2, fake.sent[0].Attempt)
			} else {
				assert.Empty(t, fake.sent)
			}
		})
	}
}
