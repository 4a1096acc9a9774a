package workflows

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// TestGuardBound: an activity is guarded only when its own timeouts bound
// its life, and then just past them. The guard at work on a real server is
// e2e's TestResetAllocatorWithAFenceWaitingOnADeadAgent.
func TestGuardBound(t *testing.T) {
	once := &temporal.RetryPolicy{MaximumAttempts: 1}
	for _, c := range []struct {
		name string
		o    workflow.ActivityOptions
		want time.Duration
	}{
		{"fence: one attempt, waits node_timeout for its agent",
			workflow.ActivityOptions{ScheduleToStartTimeout: 4 * time.Second, StartToCloseTimeout: time.Minute, RetryPolicy: once},
			4*time.Second + time.Minute + guardSlack},
		{"schedule-to-close bounds retries",
			workflow.ActivityOptions{ScheduleToCloseTimeout: reclaimCheckLife, StartToCloseTimeout: time.Minute},
			reclaimCheckLife + guardSlack},
		{"schedule-to-close wins over the others",
			workflow.ActivityOptions{ScheduleToCloseTimeout: time.Minute, ScheduleToStartTimeout: time.Second, StartToCloseTimeout: time.Minute, RetryPolicy: once},
			time.Minute + guardSlack},
		{"unlimited retries: unbounded",
			workflow.ActivityOptions{ScheduleToStartTimeout: 4 * time.Second, StartToCloseTimeout: time.Minute},
			0},
		{"one attempt with no schedule-to-start: may wait for ever for a worker",
			workflow.ActivityOptions{StartToCloseTimeout: 2 * time.Minute, RetryPolicy: once},
			0},
		{"ten attempts: unbounded by this rule",
			workflow.ActivityOptions{ScheduleToStartTimeout: time.Second, StartToCloseTimeout: time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 10}},
			0},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, guardBound(c.o))
		})
	}
}

func TestIsUnanswered(t *testing.T) {
	err := activityUnanswered{after: time.Minute}
	assert.True(t, isUnanswered(err))
	assert.True(t, isUnanswered(fmt.Errorf("fence: %w", err)))
	assert.False(t, isUnanswered(errors.New("other")))
	assert.Contains(t, err.Error(), "1m0s")
}
