package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	tqclient "github.com/trainq/trainq/client"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
)

// jupyterServer is the command line that runs a real Jupyter server:
// $TRAINQ_JUPYTER_PYTHON, else Debian's /usr/bin/python3, else python3,
// whichever has the jupyter_server module (Debian's python3-jupyter-server).
// Without one the test is skipped, unless CI is set: then it fails, so that
// a CI run cannot pass without running the real server.
func jupyterServer(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("TRAINQ_JUPYTER_PYTHON"), "/usr/bin/python3", "python3"}
	for _, py := range candidates {
		if py == "" {
			continue
		}
		if exec.Command(py, "-c", "import jupyter_server").Run() == nil {
			return py + " -m jupyter_server"
		}
	}
	msg := "no Python with jupyter_server (apt-get install python3-jupyter-server, or set TRAINQ_JUPYTER_PYTHON)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// jupyterGet calls the server's API with the token: any call but
// /api/status counts as activity.
func jupyterGet(base, token, path string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// TestIdleJupyterServerGivesItsGPUBack runs a real Jupyter server as a
// notebook on allocation idle (one 1-GPU node; idle_timeout 6s,
// idle_warning 3s), with a job queued behind it. While the test uses the
// server (API calls with its token) for twice its idle timeout, it is not
// warned nor stopped; left alone, it is warned, then stopped gracefully
// with the idle reason, and the job waiting for its GPU starts.
func TestIdleJupyterServerGivesItsGPUBack(t *testing.T) {
	jupyter := jupyterServer(t)
	startWorker(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	script := fmt.Sprintf(`echo "$%s" > %s; exec %s --port=$%s --ServerApp.token=$%s --no-browser --allow-root --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=%s`,
		cluster.NotebookTokenEnv, tokenFile, jupyter, cluster.NotebookPortEnv, cluster.NotebookTokenEnv, dir)
	spec := tqclient.NotebookSpec(env.cfg, tqclient.NotebookRequest{Region: "T", AllocationName: "idle", Script: script,
		EnvVariables: map[string]string{"JUPYTER_RUNTIME_DIR": dir, "JUPYTER_DATA_DIR": dir, "JUPYTER_CONFIG_DIR": dir}})
	nb := submit(t, spec)
	st := waitState(t, nb, protocol.StateRunning, long)
	base, urlToken, ok := strings.Cut(st.URL(), "?token=")
	require.True(t, ok, "a Jupyter server says where it serves, with the token to log in with: %q", st.URL())
	var token string
	eventually(t, long, "the Jupyter server to answer with its token", func() bool {
		token = strings.TrimSpace(readFile(t, tokenFile))
		code, err := jupyterGet(base, token, "/api/status")
		return token != "" && err == nil && code == http.StatusOK
	})
	assert.Equal(t, token, urlToken, "the URL's token is the server's")

	next := submit(t, protocol.JobSpec{Script: "true", InstanceType: "a100.1gpu", Region: "T", AllocationName: "idle",
		PriorityClass: "high", NWorkers: 1, Type: "binary"})
	eventually(t, long, "the job to queue behind the server", func() bool {
		s := status(t, next)
		return s.State == protocol.StatePending && s.Reason != ""
	})

	// In use for twice the idle timeout: no warning, no stop.
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); {
		code, err := jupyterGet(base, token, "/api/contents")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		s := status(t, nb)
		require.Equal(t, protocol.StateRunning, s.State, "a server in use is not stopped: %s", s.Message)
		require.Empty(t, s.Warning, "a server in use is not warned")
		time.Sleep(500 * time.Millisecond) // the user's pace, not a wait for an event
	}
	assert.Equal(t, protocol.StatePending, status(t, next).State, "the server still holds the GPU")

	// Left alone: warned, then stopped.
	var warned protocol.JobStatus
	eventually(t, long, "the idle server to be warned", func() bool {
		warned = status(t, nb)
		return warned.Warning != "" || warned.State.Terminal()
	})
	assert.Contains(t, warned.Warning, "unless it is used (idle_timeout 6s of allocation idle)")
	final := waitState(t, nb, protocol.StateStopped, long)
	assert.Equal(t, "stopped: idle for 6s (idle_timeout of allocation idle)", final.Message)
	a := final.Attempts[len(final.Attempts)-1]
	assert.Equal(t, final.Message, a.EndReason)
	require.NotNil(t, a.WarnedAt, "the stop was warned of")
	require.NotNil(t, a.EndedAt)
	assert.GreaterOrEqual(t, a.EndedAt.Sub(*a.WarnedAt), 2*time.Second, "the warning came its idle_warning (3s, to the server's second) before the stop")

	// Its GPU went to the job that waited for it.
	done := waitState(t, next, protocol.StateCompleted, long)
	require.NotEmpty(t, done.Attempts)
	require.NotNil(t, done.Attempts[0].StartedAt)
	assert.False(t, done.Attempts[0].StartedAt.Before(*a.StartedAt), "the job started only once the server had stopped")

	out, _, code := trainq(t, "logs", nb)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "[trainq] this Jupyter server has shown no activity since", "the warning is in the server's log")
	assert.Contains(t, out, "[trainq] stopping this Jupyter server: idle for 6s")
	assert.Contains(t, out, "received signal 15, stopping", "Jupyter got SIGTERM and stopped on its own")
}

// TestNotebookShutdownInThroughTheCLI: trainq notebook start --shutdown-in
// stops the server after that long running, warned first; a server that
// does not answer /api/status (the default script runs no Jupyter) is not
// taken for idle, though its allocation stops idle servers after 2s. Bad
// values are refused, naming the field, and start nothing.
func TestNotebookShutdownInThroughTheCLI(t *testing.T) {
	startWorker(t)
	name := tqclient.NewJobName("notebook")
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--shutdown-in", "0"}, "shutdown_in: must be a positive number of seconds"},
		{[]string{"--shutdown-in", "soon"}, "--shutdown-in: \"soon\" is neither seconds"},
		{[]string{"--shutdown-at", "61 * * * *"}, `shutdown_at: "61 * * * *": minute field "61": 61 is out of range (allowed: *, 0-59`},
	} {
		_, stderr, code := trainq(t, append([]string{"notebook", "start", "--region", "T", "--allocation", "autostop", "--name", name}, bad.args...)...)
		assert.Equal(t, 2, code, "%v: %s", bad.args, stderr)
		assert.Contains(t, stderr, bad.want)
	}
	_, err := tqclient.New(env.client, nil).Status(context.Background(), name)
	assert.Error(t, err, "a refused request starts nothing")

	out, stderr, code := trainq(t, "notebook", "start", "--region", "T", "--allocation", "autostop", "--name", name, "--shutdown-in", "8")
	require.Equal(t, 0, code, "%s%s", out, stderr)
	st := waitState(t, name, protocol.StateRunning, long)
	assert.Equal(t, int64(8), *st.Spec.Autoshutdown.ShutdownIn)
	final := waitState(t, name, protocol.StateStopped, long)
	assert.Equal(t, "stopped: ran for 8s (shutdown_in 8s)", final.Message, "not stopped as idle: the server never answered")
	a := final.Attempts[0]
	require.NotNil(t, a.WarnedAt)
	assert.Contains(t, a.Warning, "this Jupyter server will be stopped at")
	assert.Contains(t, a.Warning, "in 2s (shutdown_in 8s)")
	ran := a.EndedAt.Sub(*a.StartedAt)
	assert.GreaterOrEqual(t, ran, 8*time.Second)
}
