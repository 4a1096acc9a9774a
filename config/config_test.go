package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
