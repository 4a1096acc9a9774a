package config

import (
	"strings"
	"testing"
)

func TestNodeAddress(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		wantErr string
	}{
		{"10.0.0.7", ""},
		{"fd00::7", ""},
		{"gpu-7.example.com", ""},
		{"GPU-7", ""},
		{"gpu-7:29500", "without a port"},
		{"gpu_7", "not a host name or IP address"},
		{"-gpu", "not a host name or IP address"},
	} {
		body := strings.Replace(oneAllocation, "gpus: 2}", "gpus: 2, address: \""+tc.addr+"\"}", 1)
		cfg, err := Load(writeConfig(t, body))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), "regions[0].allocations[0].nodes[0].address") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: want an error naming the field and %q, got %v", tc.addr, tc.wantErr, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.addr, err)
		}
		if got := cfg.NodeAddress("n1"); got != tc.addr {
			t.Errorf("NodeAddress(n1) = %q, want %q", got, tc.addr)
		}
	}
	cfg, err := Load(writeConfig(t, oneAllocation))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.NodeAddress("n1"); got != "" {
		t.Errorf("a node without address: %q", got)
	}
}
