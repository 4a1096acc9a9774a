package config

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainq/trainq/scheduler"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trainq.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const oneAllocation = `default_allocation: a
regions:
  - name: R
    allocations:
      - name: a
        nodes:
          - {name: n1, family: a100, gpus: 2}
`

func TestNodeTimeout(t *testing.T) {
	for _, tc := range []struct {
		line    string
		want    time.Duration
		wantErr string
	}{
		{"", time.Minute, ""},
		{"node_timeout: 15s\n", 15 * time.Second, ""},
		{"node_timeout: 500ms\n", 0, "node_timeout: must be at least 1s"},
		{"node_timeout: soon\n", 0, "node_timeout"},
	} {
		cfg, err := Load(writeConfig(t, tc.line+oneAllocation))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: want an error naming %q, got %v", tc.line, tc.wantErr, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.line, err)
		}
		if cfg.NodeTimeout.D() != tc.want {
			t.Errorf("%q: node_timeout %s, want %s", tc.line, cfg.NodeTimeout.D(), tc.want)
		}
	}
}

func TestBadDurationNamesItsField(t *testing.T) {
	body := strings.Replace(oneAllocation, "      - name: a\n", "      - name: a\n        stop_grace_period: forever\n", 1)
	_, err := Load(writeConfig(t, body))
	want := `regions[0].allocations[0].stop_grace_period: "forever" is not a duration`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("want an error containing %q, got %v", want, err)
	}
}

func TestMaxWaiting(t *testing.T) {
	cfg, err := Load(writeConfig(t, oneAllocation))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Regions[0].Allocations[0].MaxWaiting; got != DefaultMaxWaiting {
		t.Errorf("default max_waiting %d, want %d", got, DefaultMaxWaiting)
	}
	for _, bad := range []string{"-1", "50001"} {
		body := strings.Replace(oneAllocation, "      - name: a\n", "      - name: a\n        max_waiting: "+bad+"\n", 1)
		_, err := Load(writeConfig(t, body))
		want := "regions[0].allocations[0].max_waiting: must be between 1 and 50000"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("max_waiting %s: want an error containing %q, got %v", bad, want, err)
		}
	}
}

func TestReserveAfter(t *testing.T) {
	for _, tc := range []struct {
		line    string
		want    time.Duration
		wantErr string
	}{
		{"", 30 * time.Minute, ""},
		{"        reserve_after: 2h\n", 2 * time.Hour, ""},
		{"        reserve_after: 30s\n", 0, "regions[0].allocations[0].reserve_after: must be at least 1m"},
		{"        reserve_after: -5m\n", 0, "regions[0].allocations[0].reserve_after: must be at least 1m"},
		{"        reserve_after: soon\n", 0, `regions[0].allocations[0].reserve_after: "soon" is not a duration`},
	} {
		a := loadAllocation(t, tc.line, tc.wantErr)
		if a == nil {
			continue
		}
		if a.ReserveAfter.D() != tc.want || a.Policy().ReserveAfter != tc.want {
			t.Errorf("%q: reserve_after %s (policy %s), want %s", tc.line, a.ReserveAfter.D(), a.Policy().ReserveAfter, tc.want)
		}
	}
	if _, a, _ := Default().Allocation("", "demo"); a.Policy().ReserveAfter != DefaultReserveAfter {
		t.Errorf("embedded default: reserve_after %s", a.Policy().ReserveAfter)
	}
}

func TestStarvationAfter(t *testing.T) {
	for _, tc := range []struct {
		line    string
		want    time.Duration
		wantErr string
	}{
		{"", 0, ""},
		{"        starvation_after: 24h\n", 24 * time.Hour, ""},
		{"        starvation_after: 0s\n", 0, ""},
		{"        starvation_after: 10m\n", 0, "regions[0].allocations[0].starvation_after: must be 0 (off) or at least 1h"},
		{"        starvation_after: -1h\n", 0, "regions[0].allocations[0].starvation_after: must be 0 (off) or at least 1h"},
		{"        starvation_after: later\n", 0, `regions[0].allocations[0].starvation_after: "later" is not a duration`},
	} {
		a := loadAllocation(t, tc.line, tc.wantErr)
		if a == nil {
			continue
		}
		if a.StarvationAfter.D() != tc.want || a.Policy().StarvationAfter != tc.want {
			t.Errorf("%q: starvation_after %s (policy %s), want %s", tc.line, a.StarvationAfter.D(), a.Policy().StarvationAfter, tc.want)
		}
	}
}

func TestPreemptionLimits(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lines     string
		wantCount int // Policy().MaxPreemptionsInEffect()
		wantLoss  int // Policy().MaxLossGPUHoursInEffect()
		wantErr   string
	}{
		{name: "defaults", wantCount: 3, wantLoss: 24},
		{name: "set", lines: "        max_preemptions: 5\n        max_loss_gpu_hours: 100\n", wantCount: 5, wantLoss: 100},
		{name: "no limits", lines: "        max_preemptions: -1\n        max_loss_gpu_hours: -1\n", wantCount: -1, wantLoss: -1},
		{name: "bad count", lines: "        max_preemptions: -3\n",
			wantErr: "regions[0].allocations[0].max_preemptions: must be at least 1 (a job preempted that many times is not preempted again), or -1 for no limit; got -3"},
		{name: "bad loss", lines: "        max_loss_gpu_hours: -2\n",
			wantErr: "regions[0].allocations[0].max_loss_gpu_hours: must be at least 1"},
		{name: "not a number", lines: "        max_preemptions: many\n", wantErr: "max_preemptions"},
	} {
		body := strings.Replace(oneAllocation, "      - name: a\n", "      - name: a\n"+tc.lines, 1)
		cfg, err := Load(writeConfig(t, body))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: want an error containing %q, got %v", tc.name, tc.wantErr, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, a, _ := cfg.Allocation("", "")
		if got := a.Policy().MaxPreemptionsInEffect(); got != tc.wantCount {
			t.Errorf("%s: max_preemptions in effect %d, want %d", tc.name, got, tc.wantCount)
		}
		if got := a.Policy().MaxLossGPUHoursInEffect(); got != tc.wantLoss {
			t.Errorf("%s: max_loss_gpu_hours in effect %d, want %d", tc.name, got, tc.wantLoss)
		}
	}
}

func TestTimeLimits(t *testing.T) {
	for _, tc := range []struct {
		lines     string
		def, most time.Duration
		wantErr   string
	}{
		{"", 0, 0, ""},
		{"        default_time_limit: 2h\n        max_time_limit: 24h\n", 2 * time.Hour, 24 * time.Hour, ""},
		{"        default_time_limit: 48h\n        max_time_limit: 24h\n", 0, 0, "regions[0].allocations[0].default_time_limit: 48h0m0s is more than max_time_limit 24h0m0s"},
		{"        max_time_limit: -1h\n", 0, 0, "regions[0].allocations[0].default_time_limit, max_time_limit: must not be negative"},
	} {
		a := loadAllocation(t, tc.lines, tc.wantErr)
		if a == nil {
			continue
		}
		if a.DefaultTimeLimit.D() != tc.def || a.MaxTimeLimit.D() != tc.most {
			t.Errorf("%q: got %s/%s, want %s/%s", tc.lines, a.DefaultTimeLimit.D(), a.MaxTimeLimit.D(), tc.def, tc.most)
		}
	}
}

func TestPreemptionNotice(t *testing.T) {
	for _, tc := range []struct {
		line, wantErr string
		want          time.Duration
	}{
		{"", "", 0},
		{"        preemption_notice: 2m\n", "", 2 * time.Minute},
		{"        preemption_notice: 2h\n", "regions[0].allocations[0].preemption_notice: must be between 0 and 1h0m0s, got 2h0m0s", 0},
		{"        preemption_notice: -1s\n", "regions[0].allocations[0].preemption_notice: must be between 0 and 1h0m0s", 0},
	} {
		a := loadAllocation(t, tc.line, tc.wantErr)
		if a == nil {
			continue
		}
		if got := a.PreemptionNotice.D(); got != tc.want {
			t.Errorf("%q: got %s, want %s", tc.line, got, tc.want)
		}
	}
}

// TestPreemptionNoticeByClassAndSignal: a class may have its own notice,
// and a notice may come with a signal; a class or a signal that is not
// allowed is refused, naming the field and the allowed values.
func TestPreemptionNoticeByClassAndSignal(t *testing.T) {
	for _, tc := range []struct {
		lines, wantErr string
		want           map[string]time.Duration
		signal         string
	}{
		{"", "", nil, ""},
		{"        preemption_notice: 2m\n        preemption_notice_by_class: {low: 30s, high: 0s}\n        notice_signal: SIGUSR1\n", "",
			map[string]time.Duration{"low": 30 * time.Second, "high": 0}, "SIGUSR1"},
		{"        preemption_notice_by_class: {urgent: 30s}\n", `regions[0].allocations[0].preemption_notice_by_class: "urgent" is not a class; use low, medium or high`, nil, ""},
		{"        preemption_notice_by_class: {Low: 30s}\n", `preemption_notice_by_class: "Low" is not a class`, nil, ""},
		{"        preemption_notice_by_class: {medium: 3h}\n", "regions[0].allocations[0].preemption_notice_by_class.medium: must be between 0 and 1h0m0s, got 3h0m0s", nil, ""},
		{"        notice_signal: SIGKILL\n", `regions[0].allocations[0].notice_signal: "SIGKILL" is not allowed; use one of SIGUSR1, SIGUSR2, SIGHUP, SIGINT`, nil, ""},
	} {
		a := loadAllocation(t, tc.lines, tc.wantErr)
		if a == nil {
			continue
		}
		if got := a.ClassNotices(); !maps.Equal(got, tc.want) {
			t.Errorf("%q: got %v, want %v", tc.lines, got, tc.want)
		}
		if a.NoticeSignal != tc.signal {
			t.Errorf("%q: got signal %q, want %q", tc.lines, a.NoticeSignal, tc.signal)
		}
	}
}

// loadAllocation loads oneAllocation with lines added to allocation a. With
// wantErr it checks the load fails saying so and returns nil; else it
// returns the loaded allocation.
func loadAllocation(t *testing.T, lines, wantErr string) *Allocation {
	t.Helper()
	body := strings.Replace(oneAllocation, "      - name: a\n", "      - name: a\n"+lines, 1)
	cfg, err := Load(writeConfig(t, body))
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%q: want an error containing %q, got %v", lines, wantErr, err)
		}
		return nil
	}
	if err != nil {
		t.Fatalf("%q: %v", lines, err)
	}
	return &cfg.Regions[0].Allocations[0]
}

// TestBackfill: backfill is off unless the allocation says so, and reaches the policy.
func TestBackfill(t *testing.T) {
	for _, tc := range []struct {
		line string
		want bool
	}{{"", false}, {"        backfill: true\n", true}, {"        backfill: false\n", false}} {
		a := loadAllocation(t, tc.line, "")
		if a == nil || a.Backfill != tc.want || a.Policy().Backfill != tc.want {
			t.Fatalf("%q: want backfill %v, got %+v", tc.line, tc.want, a)
		}
	}
}

// TestTopology: an allocation's topology levels and its nodes' domains reach the policy and the
// nodes; a node that leaves a level out, or names one the allocation does not list, is refused
// naming the allocation, the node and the level.
func TestTopology(t *testing.T) {
	const head = "default_allocation: a\nregions:\n  - name: R\n    allocations:\n      - name: a\n"
	for _, tc := range []struct {
		name, body, wantErr string
	}{
		{"levels and domains", "        topology: [block, rack]\n        nodes:\n" +
			"          - {name: n1, family: a100, gpus: 8, topology: {block: b1, rack: r1}}\n" +
			"          - {name: n2, family: a100, gpus: 8, topology: {block: b1, rack: r2}}\n", ""},
		{"a node without a rack", "        topology: [block, rack]\n        nodes:\n" +
			"          - {name: n1, family: a100, gpus: 8, topology: {block: b1}}\n",
			`regions[0].allocations[0]: node "n1" has no topology.rack`},
		{"a level the allocation does not list", "        topology: [rack]\n        nodes:\n" +
			"          - {name: n1, family: a100, gpus: 8, topology: {rack: r1, row: x}}\n",
			`regions[0].allocations[0]: node "n1": topology.row is not one of the allocation's topology levels (rack)`},
		{"a required level", "        topology: [block, rack]\n        required_topology: rack\n        defragment_after: 30m\n        nodes:\n" +
			"          - {name: n1, family: a100, gpus: 8, topology: {block: b1, rack: r1}}\n" +
			"          - {name: n2, family: a100, gpus: 8, topology: {block: b1, rack: r2}}\n", ""},
		{"a required level it does not have", "        topology: [rack]\n        required_topology: row\n        nodes:\n" +
			"          - {name: n1, family: a100, gpus: 8, topology: {rack: r1}}\n",
			`regions[0].allocations[0].required_topology: "row" is not one of the allocation's topology levels (rack)`},
		{"both", "        topology: [rack]\n        required_topology: rack\n        preferred_topology: rack\n        nodes:\n" +
			"          - {name: n1, family: a100, gpus: 8, topology: {rack: r1}}\n",
			`regions[0].allocations[0].preferred_topology: set required_topology or preferred_topology, not both`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(writeConfig(t, head+tc.body))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want an error containing %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			a := cfg.Regions[0].Allocations[0]
			if want := (a.RequiredTopology != ""); a.Policy().GangTopology != (scheduler.GangTopology{Level: a.RequiredTopology, Required: want}) {
				t.Fatalf("policy gang topology %+v", a.Policy().GangTopology)
			}
			if want := map[bool]time.Duration{true: 30 * time.Minute}[a.RequiredTopology != ""]; a.Policy().DefragmentAfter != want {
				t.Fatalf("policy defragment_after %s, want %s", a.Policy().DefragmentAfter, want)
			}
			if got := a.Policy().Topology; !slices.Equal(got, []string{"block", "rack"}) {
				t.Fatalf("policy topology %v", got)
			}
			if got := a.Nodes[1].Topology; got["block"] != "b1" || got["rack"] != "r2" {
				t.Fatalf("n2's topology %v", got)
			}
		})
	}
}
