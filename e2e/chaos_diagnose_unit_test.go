package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/trainq/trainq/activities"
	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

func TestStuckCause(t *testing.T) {
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(-d)) }
	task := func(state enumspb.PendingWorkflowTaskState, scheduled, started time.Duration) *workflowservice.DescribeWorkflowExecutionResponse {
		wt := &workflowpb.PendingWorkflowTaskInfo{State: state, ScheduledTime: ago(scheduled)}
		if started > 0 {
			wt.StartedTime = ago(started)
		}
		return &workflowservice.DescribeWorkflowExecutionResponse{PendingWorkflowTask: wt}
	}
	activity := func(expiredAgo time.Duration) *workflowservice.DescribeWorkflowExecutionResponse {
		return &workflowservice.DescribeWorkflowExecutionResponse{PendingActivities: []*workflowpb.PendingActivityInfo{{
			ActivityType: &commonpb.ActivityType{Name: "StartWorker"}, State: enumspb.PENDING_ACTIVITY_STATE_SCHEDULED,
			Attempt: 1, ExpirationTime: ago(expiredAgo)}}}
	}
	for _, tc := range []struct {
		name    string
		desc    *workflowservice.DescribeWorkflowExecutionResponse
		pollers int
		want    string
	}{
		{"a task lost on a polled queue", task(enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED, 5*time.Minute, 0), 2, "the task was lost"},
		{"a task scheduled on a queue nobody polls", task(enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED, 5*time.Minute, 0), 0, "no worker polls"},
		{"a task started and never timed out", task(enumspb.PENDING_WORKFLOW_TASK_STATE_STARTED, 5*time.Minute, 4*time.Minute), 2, "did not fire its start-to-close"},
		{"a task just scheduled", task(enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED, 2*time.Second, 0), 2, "under way"},
		{"an activity past its timeouts", activity(3 * time.Minute), 2, "StartWorker is 3m0s past its timeouts"},
		{"an activity within them", activity(-time.Minute), 2, "waits on activity StartWorker"},
		{"nothing pending", &workflowservice.DescribeWorkflowExecutionResponse{}, 2, "waits for a signal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Contains(t, stuckCause(tc.desc, tc.pollers, now), tc.want)
		})
	}
}

// TestChaosDiagnoseAStuckWorkflow reads a real stuck workflow on the dev
// server, one on a task queue no worker polls, as the chaos report does.
func TestChaosDiagnoseAStuckWorkflow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := "diagnose-" + tqclient.NewJobName(scheduler.KindJob)
	_, err := env.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: chaosDeadQueue}, protocol.JobWorkflowName)
	require.NoError(t, err)
	defer func() { _ = env.client.TerminateWorkflow(context.Background(), id, "", "test over") }()

	lines := chaosDiagnose(ctx, env.client, id, time.Now())
	text := strings.Join(lines, "\n")
	t.Log(text)
	assert.Equal(t, "cause: no worker polls its task queue", lines[0])
	assert.Contains(t, text, "on task queue "+chaosDeadQueue)
	assert.Contains(t, text, "pending workflow task: Scheduled, attempt 1")
	assert.Contains(t, text, "workflow pollers: none")
	assert.Contains(t, text, "WorkflowTaskScheduled")
	assert.Contains(t, text, "started never")
}

// TestRegistrationResetPoint: an allocator reset into a recovery's
// registration goes to the first workflow task completed while the latest
// registration that had one was open; a fence's registration (it names its
// jobs) and a task after the registration closed do not count.
func TestRegistrationResetPoint(t *testing.T) {
	var events []*historypb.HistoryEvent
	add := func(e *historypb.HistoryEvent) int64 {
		e.EventId = int64(len(events) + 1)
		events = append(events, e)
		return e.EventId
	}
	task := func() int64 {
		return add(&historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED})
	}
	register := func(jobs []string) int64 {
		in, err := converter.GetDefaultDataConverter().ToPayloads(activities.RegisterJobsInput{Epoch: "e", Jobs: jobs})
		require.NoError(t, err)
		return add(&historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
			Attributes: &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{
				ActivityType: &commonpb.ActivityType{Name: "RegisterJobs"}, Input: in}}})
	}
	complete := func(scheduled int64) {
		add(&historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
			Attributes: &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{
				ScheduledEventId: scheduled}}})
	}

	task()
	first := register(nil) // a recovery with no task inside it
	complete(first)
	task()
	_, _, ok := registrationResetPoint(events)
	assert.False(t, ok, "no task completed while the registration was open")

	second := register(nil)
	inside := task()
	task()
	complete(second)
	fence := register([]string{"j"}) // a fence's: not a recovery
	task()
	complete(fence)
	point, scheduled, ok := registrationResetPoint(events)
	require.True(t, ok)
	assert.Equal(t, second, scheduled)
	assert.Equal(t, inside, point)

	third := register(nil) // still open: any task after it counts
	open := task()
	point, scheduled, ok = registrationResetPoint(events)
	require.True(t, ok)
	assert.Equal(t, third, scheduled)
	assert.Equal(t, open, point)
}
