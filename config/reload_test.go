package config

import (
	"strings"
	"testing"
)

// TestCheckReload: queues may change while trainq-api runs; anything else
// is refused, naming it.
func TestCheckReload(t *testing.T) {
	load := func(lines string) *Config {
		t.Helper()
		cfg, err := Load(writeConfig(t, strings.Replace(oneAllocation, "      - name: a\n", "      - name: a\n"+lines, 1)))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	old := load("        queues:\n          - {name: default, default: true}\n          - {name: prod, nodes: [n1], workspaces: [team-b]}\n")
	for _, tc := range []struct {
		lines, want string
	}{
		{"        queues:\n          - {name: default, default: true}\n          - {name: prod, nodes: [n1], workspaces: [team-a, team-b]}\n", ""},
		{"", ""}, // every queue removed: the allocation's one default queue
		{"        queues:\n          - {name: default, default: true}\n        max_preemptions: 7\n", "regions[0].allocations[0].max_preemptions changed"},
		{"        limits:\n          - {class: high, max_gpus: 2}\n", "regions[0].allocations[0].limits changed"},
	} {
		err := CheckReload(old, load(tc.lines))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.lines, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want %q", tc.lines, err, tc.want)
		}
	}
}
