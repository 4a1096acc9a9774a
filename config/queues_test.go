package config

import (
	"testing"

	"github.com/trainq/trainq/scheduler"
)

// TestQueues: an allocation's queues are checked when the file loads, each
// error naming the field and what is allowed.
func TestQueues(t *testing.T) {
	for _, tc := range []struct{ lines, wantErr string }{
		{"", ""},
		{"        queues:\n          - {name: default, default: true}\n          - {name: prod, nodes: [n1], job_priority_allowed: [high], default_priority: {job: high}, workspaces: [team-b]}\n", ""},
		{"        queues:\n          - {name: prod, nodes: [n9]}\n", `regions[0].allocations[0].queues[0].nodes[0]: allocation a has no node "n9"`},
		{"        queues:\n          - {name: prod, job_priority_allowed: [urgent]}\n", `queues[0].job_priority_allowed[0]: "urgent" is not a priority class; use low, medium, high (or ML Space's shared-low, shared-medium)`},
		{"        queues:\n          - {name: prod, job_priority_allowed: [high], default_priority: {job: low}}\n", "queues[0].default_priority.job: low is not among the queue's job_priority_allowed (high)"},
		{"        queues:\n          - {name: a, default: true}\n          - {name: b, default: true}\n", "queues: 2 queues are marked default; mark one"},
		{"        queues:\n          - {name: a}\n          - {name: a}\n", `queues[1].name: queue "a" appears twice in allocation a`},
		{"        queues:\n          - {name: a, type: private}\n", `queues[0].type: "private" is not allowed; use default, custom, shared`},
		{"        queues:\n          - {name: 'a:b'}\n", `queues[0].name: "a:b" is not a valid name`},
	} {
		loadAllocation(t, tc.lines, tc.wantErr)
	}
}

// TestQueueRules: the default queue, lookups by name, allowed classes with
// ML Space's shared classes, workspace assignment and default classes.
func TestQueueRules(t *testing.T) {
	a := loadAllocation(t, "        queues:\n          - {name: shared, type: shared, job_priority_allowed: [shared-low, shared-medium]}\n"+
		"          - {name: prod, default: true, job_priority_allowed: [medium, high], default_priority: {job: high}, workspaces: [team-b]}\n", "")
	if a == nil {
		return
	}
	if got := a.DefaultQueue().Name; got != "prod" {
		t.Errorf("default queue: got %s, want prod (marked default)", got)
	}
	shared, err := a.QueueNamed("shared")
	if err != nil {
		t.Fatal(err)
	}
	if shared.Allows(scheduler.High) || !shared.Allows(scheduler.Low) || shared.AllowedText() != "low, medium" {
		t.Errorf("shared allows %s", shared.AllowedText())
	}
	if c := shared.DefaultClass(scheduler.KindJob); c != scheduler.Medium {
		t.Errorf("shared's default job class: %s", c)
	}
	prod, _ := a.QueueNamed("")
	if c := prod.DefaultClass(scheduler.KindJob); c != scheduler.High {
		t.Errorf("prod's default job class: %s", c)
	}
	if !prod.AssignedTo("team-b") || prod.AssignedTo("team-a") || !prod.AssignedTo("") {
		t.Error("prod is assigned to team-b (and to operators without a workspace) only")
	}
	if _, err := a.QueueNamed("night"); err == nil || err.Error() != `allocation a has no queue "night"; its queues are shared, prod` {
		t.Errorf("unknown queue: %v", err)
	}
	plain := loadAllocation(t, "", "")
	if q := plain.DefaultQueue(); q.Name != DefaultQueueName || !q.Allows(scheduler.High) || !q.AssignedTo("anyone") {
		t.Errorf("an allocation without queues has one open default queue: %+v", q)
	}
}
