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
	pkg := clientLibDir(t)
	out := runPython(t, timeout, env, "-m", "unittest", "discover", "-s", filepath.Join(pkg, "tests"), "-p", pattern, "-v")
	if !strings.Contains(out, "\nOK") {
		t.Fatalf("python's tests did not say OK; their output is above")
	}
}

func clientLibDir(t *testing.T) string {
	t.Helper()
	pkg, err := filepath.Abs("../python/client_lib")
	if err != nil {
		t.Fatal(err)
	}
	return pkg
}

// runPython runs python3 -B args with client_lib on PYTHONPATH and env
// added, logs its output and fails the test when it fails.
func runPython(t *testing.T, timeout time.Duration, env []string, args ...string) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is not installed: CI must run python/client_lib's tests")
		}
		t.Skip("python3 is not installed: python/client_lib's tests did not run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{"-B"}, args...)...)
	pythonPath := clientLibDir(t)
	if p := os.Getenv("PYTHONPATH"); p != "" {
		pythonPath += string(os.PathListSeparator) + p
	}
	cmd.Env = append(os.Environ(), append([]string{"PYTHONPATH=" + pythonPath, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"}, env...)...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("python3 %s (%s):\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out)
	if ctx.Err() != nil {
		t.Fatalf("python did not finish within %s", timeout)
	}
	if err != nil {
		t.Fatalf("python failed (%v); its output is above", err)
	}
	return string(out)
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
	clientLibTests(t, "test_*e2e*.py", 4*time.Minute, clientLibEnv()...)
}

func clientLibEnv() []string {
	return []string{"TRAINQ_API_URL=" + env.server.URL, "TRAINQ_API_TOKEN=" + env.tokens["alice"], "TRAINQ_REGION=SR006"}
}

// TestClientLibNotebook runs examples/notebook.py on the default
// allocation (two a100plus nodes): the priorities page's job, submitted
// through client_lib, preempts a low job on both nodes and runs; the low
// job then runs again.
func TestClientLibNotebook(t *testing.T) {
	needServer(t)
	out := runPython(t, 3*time.Minute, clientLibEnv(), "../examples/notebook.py", "--allocation", "default", "--timeout", "90")
	for _, want := range []string{"The medium job overtook the low one", "epoch 5", "the low job runs again, attempt 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("notebook.py's output lacks %q", want)
		}
	}
}
