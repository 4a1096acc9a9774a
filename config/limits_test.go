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
		{"        limits:\n          - {class: high}\n", "limits[0].max_gpus: missing: say how many high GPUs the workspace may hold"},
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
}
