package api

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clientLibTests runs python/client_lib's unittest files matching pattern
// with the test server's address and alice's token in the environment and
// the package on PYTHONPATH, and fails with Python's output when Python
// fails. Without python3 the tests skip, except under CI=true, where they
// must run.
func clientLibTests(t *testing.T, pattern string, timeout time.Duration, env ...string) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is not installed: CI must run python/client_lib's tests")
		}
		t.Skip("python3 is not installed: python/client_lib's tests (" + pattern + ") did not run")
	}
	pkg, err := filepath.Abs("../python/client_lib")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-B", "-m", "unittest", "discover", "-s", filepath.Join(pkg, "tests"), "-p", pattern, "-v")
	pythonPath := pkg
	if p := os.Getenv("PYTHONPATH"); p != "" {
		pythonPath += string(os.PathListSeparator) + p
	}
	cmd.Env = append(os.Environ(), append([]string{"PYTHONPATH=" + pythonPath, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"}, env...)...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest discover -p %q (%s):\n%s", pattern, time.Since(start).Round(time.Millisecond), out)
	if ctx.Err() != nil {
		t.Fatalf("python's tests did not finish within %s", timeout)
	}
	if err != nil {
		t.Fatalf("python's tests failed (%v); their output is above", err)
	}
	if !strings.Contains(string(out), "\nOK") {
		t.Fatalf("python's tests did not say OK; their output is above")
	}
}

// TestClientLibUnit runs client_lib's unit tests (request building, output
// shapes, retries and errors against a fake API): no server needed.
func TestClientLibUnit(t *testing.T) {
	clientLibTests(t, "test_unit*.py", 2*time.Minute)
}

// TestClientLibE2E runs client_lib's e2e tests against the real stack: this
// package's dev server, trainq-worker and API server, as alice (team-a).
func TestClientLibE2E(t *testing.T) {
	needServer(t)
	clientLibTests(t, "test_*e2e*.py", 4*time.Minute,
		"TRAINQ_API_URL="+env.server.URL, "TRAINQ_API_TOKEN="+env.tokens["alice"], "TRAINQ_REGION=SR006")
}
