package e2e

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
)

// `trainq logs` reads a job's log through the client's LogSource: its last
// lines as they are now, then, followed, every new line until the job ends.
func TestLogsThroughTheCLI(t *testing.T) {
	startWorker(t)
	g := gate(filepath.Join(t.TempDir(), "go"))
	job := submit(t, fixture.Job{GPUs: 1, Script: "echo one; echo two; echo three; " + g.waitFor() + "; echo four"}.Spec())
	waitState(t, job, protocol.StateRunning, long)
	eventually(t, long, "the first lines in the log", func() bool {
		out, _, _ := trainq(t, "logs", job)
		return strings.Contains(out, "three\n")
	})

	out, errOut, code := trainq(t, "logs", "--tail", "2", job)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "two\nthree\n", out)

	follow := exec.Command(filepath.Join(env.binDir, "trainq"), "logs", "--follow", "--tail", "1", job)
	follow.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+env.hostPort, "TRAINQ_CONFIG="+env.configPath)
	var followErr bytes.Buffer
	follow.Stderr = &followErr
	stdout, err := follow.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, follow.Start())
	lines := bufio.NewScanner(stdout)
	require.True(t, lines.Scan(), "the followed log's first line")
	assert.Equal(t, "three", lines.Text())
	g.open(t) // only now does the job write its last line and end
	var rest []string
	for lines.Scan() {
		rest = append(rest, lines.Text())
	}
	require.NoError(t, follow.Wait(), followErr.String())
	require.NotEmpty(t, rest)
	assert.Equal(t, "four", rest[0], "every line after the tail, until the job ended: %q", rest)
	assert.Contains(t, followErr.String(), "ended Completed")
}
