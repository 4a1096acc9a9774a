package config

import (
	"reflect"
	"testing"

	"github.com/trainq/trainq/scheduler"
)

// TestLimits: an allocation's limits are checked when the file loads, each
// error naming the field and what is allowed, and reach the policy.
func TestLimits(t *testing.T) {
	for _, tc := range []struct{ lines, wantErr string }{
		{"        limits:\n          - {class: high, max_gpus: 16}\n          - {workspace: team-b, class: high, max_gpus: 0}\n", ""},
		{"        limits:\n          - {class: urgent, max_gpus: 1}\n", `regions[0].allocations[0].limits[0].class: "urgent" is not a class; use low, medium or high`},
		{"        limits:\n          - {max_gpus: 1}\n", `limits[0].class: "" is not a class`},
		{"        limits:\n          - {class: high}\n", "limits[0]: say how many high GPUs the workspace may hold (max_gpus), how many high jobs it may have waiting (max_waiting), or both"},
		{"        limits:\n          - {class: low, max_waiting: -1}\n", "limits[0].max_waiting: must be between 0 and 50000, got -1"},
		{"        limits:\n          - {class: low, max_waiting: 50001}\n", "limits[0].max_waiting: must be between 0 and 50000, got 50001"},
		{"        limits:\n          - {class: low, max_gpus: -2}\n", "limits[0].max_gpus: must be 0 or more, got -2"},
		{"        limits:\n          - {workspace: 'a b', class: low, max_gpus: 2}\n", `limits[0].workspace: "a b" is not a valid name`},
		{"        limits:\n          - {class: high, max_gpus: 1}\n          - {class: High, max_gpus: 2}\n", "limits[1]: every workspace has a second high limit in allocation a"},
		{"        limits:\n          - {workspace: w, class: low, max_gpus: 1}\n          - {workspace: w, class: low, max_gpus: 2}\n", "limits[1]: workspace w has a second low limit in allocation a"},
		{"        limits:\n          - {class: high, max_gpus: 1, max_jobs: 3}\n", "max_jobs"},
	} {
		loadAllocation(t, tc.lines, tc.wantErr)
	}
	a := loadAllocation(t, "        limits:\n          - {class: high, max_gpus: 16}\n          - {workspace: team-b, class: medium, max_gpus: 0}\n", "")
	want := []scheduler.Limit{{Class: scheduler.High, MaxGPUs: 16}, {Workspace: "team-b", Class: scheduler.Medium, MaxGPUs: 0}}
	if got := a.Policy().Limits; !reflect.DeepEqual(got, want) {
		t.Fatalf("policy limits %+v, want %+v", got, want)
	}
	a = loadAllocation(t, "        limits:\n          - {class: high, max_gpus: 16, max_waiting: 20}\n          - {workspace: team-b, class: high, max_waiting: 0}\n", "")
	if got, want := a.Policy().Limits, []scheduler.Limit{{Class: scheduler.High, MaxGPUs: 16}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("policy limits %+v, want %+v (a waiting limit is not the scheduler's)", got, want)
	}
	wl := a.WaitingLimits()
	for _, tc := range []struct {
		ws    string
		class scheduler.Class
		want  int
	}{{"team-a", scheduler.High, 20}, {"team-b", scheduler.High, 0}, {"team-a", scheduler.Medium, -1}, {"", scheduler.High, -1}} {
		if got := wl.Cap(tc.ws, tc.class); got != tc.want {
			t.Errorf("waiting cap of %q in %s: %d, want %d", tc.ws, tc.class, got, tc.want)
		}
	}
}
