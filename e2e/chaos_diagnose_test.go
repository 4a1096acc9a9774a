package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// chaosStuckEvents is how many of a stuck job's last history events its
// diagnosis lists.
const chaosStuckEvents = 8

// chaosDiagnose says what an open workflow is waiting for, as the server
// sees it: its pending workflow task and activities with their timeouts, its
// versioning (a pinned build no live worker serves waits for ever), the
// pollers of its task queue, and its last history events. One line each,
// for the report's stuck jobs; what could not be read says why.
func chaosDiagnose(ctx context.Context, c client.Client, id string, now time.Time) []string {
	var out []string
	ago := func(ts *timestamppb.Timestamp) string {
		if ts == nil || ts.AsTime().Unix() <= 0 {
			return "never"
		}
		return now.Sub(ts.AsTime()).Round(time.Second).String() + " ago"
	}
	d, err := c.DescribeWorkflow(ctx, id, "")
	if err != nil {
		return []string{"describe: " + err.Error()}
	}
	desc := d.RawResponse
	queue := desc.GetExecutionConfig().GetTaskQueue().GetName()
	info := desc.GetWorkflowExecutionInfo()
	line := fmt.Sprintf("run %s on task queue %s, %d history events", info.GetExecution().GetRunId(), queue, info.GetHistoryLength())
	if v := info.GetVersioningInfo(); v != nil {
		line += fmt.Sprintf("; versioning %s", v.GetBehavior())
		if dv := v.GetDeploymentVersion(); dv != nil {
			line += " on build " + dv.GetBuildId()
		}
		if o := v.GetVersioningOverride(); o != nil {
			line += fmt.Sprintf(", override %v", o)
		}
	}
	out = append(out, line)
	if wt := desc.GetPendingWorkflowTask(); wt != nil {
		out = append(out, fmt.Sprintf("pending workflow task: %s, attempt %d, scheduled %s, started %s, original scheduled %s",
			wt.GetState(), wt.GetAttempt(), ago(wt.GetScheduledTime()), ago(wt.GetStartedTime()),
			ago(wt.GetOriginalScheduledTime())))
	} else {
		out = append(out, "no pending workflow task")
	}
	for _, a := range desc.GetPendingActivities() {
		l := fmt.Sprintf("pending activity %s (id %s): %s, attempt %d, scheduled %s, last started %s, heartbeat %s, expires %s",
			a.GetActivityType().GetName(), a.GetActivityId(), a.GetState(), a.GetAttempt(),
			ago(a.GetScheduledTime()), ago(a.GetLastStartedTime()), ago(a.GetLastHeartbeatTime()),
			chaosWhen(now, a.GetExpirationTime().AsTime()))
		if w := a.GetLastWorkerIdentity(); w != "" {
			l += ", last worker " + w
		}
		if f := a.GetLastFailure(); f != nil {
			l += ", last failure: " + f.GetMessage()
		}
		out = append(out, l)
	}
	pollerCount := -1 // not known
	if queue != "" {
		tq, err := c.DescribeTaskQueue(ctx, queue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
		if err != nil {
			out = append(out, fmt.Sprintf("task queue %s: %v", queue, err))
		} else {
			pollerCount = len(tq.GetPollers())
			var pollers []string
			for _, p := range tq.GetPollers() {
				pollers = append(pollers, fmt.Sprintf("%s (last poll %s, build %s)", p.GetIdentity(),
					ago(p.GetLastAccessTime()), p.GetDeploymentOptions().GetBuildId()))
			}
			if len(pollers) == 0 {
				pollers = []string{"none"}
			}
			out = append(out, fmt.Sprintf("task queue %s workflow pollers: %s", queue, strings.Join(pollers, ", ")))
		}
	}
	out = append([]string{"cause: " + stuckCause(desc, pollerCount, now)}, out...)
	events, err := chaosHistory(c, id, "")
	if err != nil {
		return append(out, "history: "+err.Error())
	}
	if len(events) > chaosStuckEvents {
		events = events[len(events)-chaosStuckEvents:]
	}
	for _, e := range events {
		out = append(out, fmt.Sprintf("event %d %s (%s)%s", e.GetEventId(), e.GetEventType(), ago(e.GetEventTime()), chaosEventDetail(e)))
	}
	return out
}

// stuckLimit is how long a workflow task or an activity may stay as it is
// before the diagnosis calls it stuck: well past trainq's task timeouts (5s),
// sticky schedule-to-start (2s) and heartbeat timeouts (15-20s).
const stuckLimit = time.Minute

// stuckCause names, from what the server says of an open workflow, why it
// makes no progress: the first of a lost or hung workflow task, a task queue
// no worker polls, an activity the server did not time out, or what it
// waits on.
func stuckCause(desc *workflowservice.DescribeWorkflowExecutionResponse, pollers int, now time.Time) string {
	if wt := desc.GetPendingWorkflowTask(); wt != nil {
		scheduled := now.Sub(wt.GetScheduledTime().AsTime()).Round(time.Second)
		switch {
		case wt.GetState() == enumspb.PENDING_WORKFLOW_TASK_STATE_STARTED && now.Sub(wt.GetStartedTime().AsTime()) > stuckLimit:
			return fmt.Sprintf("its workflow task started %s ago and neither completed nor timed out: the server did not fire its start-to-close timeout; queries wait behind it",
				now.Sub(wt.GetStartedTime().AsTime()).Round(time.Second))
		case wt.GetState() == enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED && scheduled > stuckLimit && pollers == 0:
			return fmt.Sprintf("its workflow task was scheduled %s ago and no worker polls its task queue", scheduled)
		case wt.GetState() == enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED && scheduled > stuckLimit:
			return fmt.Sprintf("its workflow task was scheduled %s ago and never started though %d workers poll its task queue: the task was lost "+
				"(a workflow task on a normal task queue has no schedule-to-start timeout), and queries wait behind it", scheduled, pollers)
		}
	}
	for _, a := range desc.GetPendingActivities() {
		if exp := a.GetExpirationTime().AsTime(); a.GetExpirationTime() != nil && exp.Unix() > 0 && now.Sub(exp) > stuckLimit {
			return fmt.Sprintf("activity %s is %s past its timeouts and the server has not timed it out", a.GetActivityType().GetName(), now.Sub(exp).Round(time.Second))
		}
	}
	if pollers == 0 {
		return "no worker polls its task queue"
	}
	if as := desc.GetPendingActivities(); len(as) > 0 {
		return fmt.Sprintf("it waits on activity %s (%s, attempt %d)", as[0].GetActivityType().GetName(), as[0].GetState(), as[0].GetAttempt())
	}
	if desc.GetPendingWorkflowTask() != nil {
		return "its workflow task is under way"
	}
	return "it waits for a signal, a timer or an update; nothing of it is pending on the server"
}

// chaosWhen says how far from now t is, either way.
func chaosWhen(now, t time.Time) string {
	switch {
	case t.IsZero() || t.Unix() <= 0:
		return "never"
	case t.After(now):
		return "in " + t.Sub(now).Round(time.Second).String()
	default:
		return t.Sub(now).Round(time.Second).String() + " ago"
	}
}

// chaosEventDetail names what an event is about where its type does not.
func chaosEventDetail(e *historypb.HistoryEvent) string {
	switch {
	case e.GetActivityTaskScheduledEventAttributes() != nil:
		a := e.GetActivityTaskScheduledEventAttributes()
		return fmt.Sprintf(": %s on %s, schedule-to-close %s, start-to-close %s", a.GetActivityType().GetName(),
			a.GetTaskQueue().GetName(), a.GetScheduleToCloseTimeout().AsDuration(), a.GetStartToCloseTimeout().AsDuration())
	case e.GetActivityTaskStartedEventAttributes() != nil:
		return ": by " + e.GetActivityTaskStartedEventAttributes().GetIdentity()
	case e.GetWorkflowTaskStartedEventAttributes() != nil:
		return ": by " + e.GetWorkflowTaskStartedEventAttributes().GetIdentity()
	case e.GetWorkflowTaskScheduledEventAttributes() != nil:
		return ": on " + e.GetWorkflowTaskScheduledEventAttributes().GetTaskQueue().GetName()
	case e.GetWorkflowTaskTimedOutEventAttributes() != nil:
		return ": " + e.GetWorkflowTaskTimedOutEventAttributes().GetTimeoutType().String()
	case e.GetWorkflowTaskFailedEventAttributes() != nil:
		return ": " + e.GetWorkflowTaskFailedEventAttributes().GetFailure().GetMessage()
	case e.GetWorkflowExecutionSignaledEventAttributes() != nil:
		return ": " + e.GetWorkflowExecutionSignaledEventAttributes().GetSignalName()
	case e.GetTimerStartedEventAttributes() != nil:
		return ": " + e.GetTimerStartedEventAttributes().GetStartToFireTimeout().AsDuration().String()
	}
	return ""
}
