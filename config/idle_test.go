package config

import (
	"testing"
	"time"
)

// TestIdleTimeout: idle_timeout and idle_warning per allocation and per
// queue (the queue's override the allocation's), each error naming the field.
func TestIdleTimeout(t *testing.T) {
	for _, tc := range []struct{ lines, wantErr string }{
		{"        idle_timeout: 30m\n        idle_warning: 5m\n", ""},
		{"        idle_timeout: 500ms\n", "regions[0].allocations[0].idle_timeout: must be at least 1s (or 0s: idle Jupyter servers are not stopped), got 500ms"},
		{"        idle_timeout: 30m\n        idle_warning: 30m\n", "regions[0].allocations[0].idle_warning: 30m0s must be shorter than idle_timeout 30m0s"},
		{"        idle_warning: -1s\n", "regions[0].allocations[0].idle_warning: must not be negative"},
		{"        idle_timeout: soon\n", `"soon" is not a duration`},
		{"        idle_timeout: 30m\n        queues:\n          - {name: q, idle_timeout: 100ms}\n", "regions[0].allocations[0].queues[0].idle_timeout: must be at least 1s"},
		{"        idle_timeout: 30m\n        queues:\n          - {name: q, idle_timeout: 2m, idle_warning: 3m}\n",
			"regions[0].allocations[0].queues[0].idle_warning: 3m0s must be shorter than the queue's idle_timeout 2m0s (queue q of allocation a)"},
	} {
		loadAllocation(t, tc.lines, tc.wantErr)
	}
	a := loadAllocation(t, "        idle_timeout: 30m\n        idle_warning: 4m\n        queues:\n          - {name: default, default: true}\n"+
		"          - {name: short, idle_timeout: 10m}\n          - {name: never, idle_timeout: 0s}\n", "")
	for _, tc := range []struct {
		queue string
		want  IdleRule
	}{
		{"default", IdleRule{Timeout: 30 * time.Minute, Warning: 4 * time.Minute, Source: "allocation a"}},
		{"short", IdleRule{Timeout: 10 * time.Minute, Warning: 4 * time.Minute, Source: "queue short of allocation a"}},
		{"never", IdleRule{}},
	} {
		q, err := a.QueueNamed(tc.queue)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.IdleRule(q); got != tc.want {
			t.Errorf("queue %s: got %+v, want %+v", tc.queue, got, tc.want)
		}
	}
	if got := loadAllocation(t, "", "").IdleRule(Queue{Name: DefaultQueueName}); got != (IdleRule{}) {
		t.Errorf("no idle_timeout: %+v", got)
	}
}
