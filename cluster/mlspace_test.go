package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeConda writes a conda on a PATH of its own that knows one environment,
// "torch": `conda run [--no-capture-output] -n torch CMD...` runs CMD with
// CONDA_DEFAULT_ENV=torch; any other environment fails as conda does.
func fakeConda(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	script := `#!/bin/sh
[ "$1" = run ] || exit 2; shift
[ "$1" = --no-capture-output ] && shift
[ "$1" = -n ] || [ "$1" = -p ] || exit 2
env=$2; shift 2
[ "$env" = torch ] || { echo "EnvironmentLocationNotFound: $env" >&2; exit 1; }
CONDA_DEFAULT_ENV=$env exec "$@"
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "conda"), []byte(script), 0o755))
	return dir
}

func runShell(t *testing.T, path, line string) (string, int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", line)
	cmd.Env = []string{"PATH=" + path}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return string(out), code
}

// TestInConda: a command runs in its conda environment; a missing conda
// or environment fails the worker with a sentence naming it and the node.
func TestInConda(t *testing.T) {
	conda := fakeConda(t)
	sys := "/usr/bin:/bin"
	spec := WorkerSpec{Node: "n1", CondaEnv: "torch"}
	line := `echo "env=$CONDA_DEFAULT_ENV arg='it''s'"`

	out, code := runShell(t, conda+":"+sys, spec.InConda(line))
	assert.Equal(t, 0, code, out)
	assert.Equal(t, "env=torch arg='it''s'\n", out, "the line runs, quoted intact, inside the environment")

	out, code = runShell(t, sys, spec.InConda(line))
	assert.Equal(t, 127, code)
	assert.Contains(t, out, "trainq: conda_env torch: conda is not installed on node n1")

	missing := WorkerSpec{Node: "n1", CondaEnv: "nope"}
	out, code = runShell(t, conda+":"+sys, missing.InConda(line))
	assert.Equal(t, 127, code)
	assert.Contains(t, out, "trainq: conda_env nope: no such conda environment on node n1")

	assert.Equal(t, line, WorkerSpec{}.InConda(line), "no conda_env: the line as it is")
	assert.Contains(t, WorkerSpec{CondaEnv: "/opt/envs/x"}.InConda("true"), "conda run --no-capture-output -p '/opt/envs/x'")
}

// TestElasticEnvironment: a pytorch_elastic worker gets torchrun's range.
func TestElasticEnvironment(t *testing.T) {
	spec := WorkerSpec{ID: WorkerID{Job: "j", Attempt: 1}, Workers: 4, Type: TypePyTorchElastic,
		ElasticMinWorkers: 2, ElasticMaxWorkers: 4, ElasticMaxRestarts: 5}
	env := strings.Join(spec.Environment(0), "\n")
	for _, want := range []string{"PET_NNODES=2:4", "PET_MAX_RESTARTS=5", "TRAINQ_ELASTIC_MIN_WORKERS=2", "TRAINQ_ELASTIC_MAX_WORKERS=4"} {
		assert.Contains(t, env, want)
	}
	plain := strings.Join(WorkerSpec{ID: WorkerID{Job: "j", Attempt: 1}, Workers: 4}.Environment(0), "\n")
	assert.NotContains(t, plain, "PET_NNODES")
}
