package client

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/trainq/trainq/cluster/agentlogs"
	"github.com/trainq/trainq/cluster/local/logfile"
	"github.com/trainq/trainq/config"
)

// The log source is chosen by the configured backend: the local backend's
// files are read here first, and say when this machine has none; a
// Kubernetes backend's logs are read only through the node agents.
func TestLogSourceFollowsTheBackend(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	local := &config.Config{Backend: config.BackendLocal, DataDir: missing}
	kube := &config.Config{Backend: config.BackendKubernetes, DataDir: missing}

	files, err := (&Client{Config: local}).LogSource()
	require.NoError(t, err)
	assert.Equal(t, logfile.Source{DataDir: missing}, files)
	err = files.Reachable()
	require.Error(t, err, "a data dir this machine does not have")
	assert.Contains(t, err.Error(), "the data dir "+missing+" does not exist")

	var temporal sdkclient.Client = struct{ sdkclient.Client }{}
	viaAgents, err := (&Client{Config: local, Temporal: temporal}).LogSource()
	require.NoError(t, err)
	assert.Equal(t, &agentlogs.Reader{Client: temporal, Local: logfile.Source{DataDir: missing}}, viaAgents)
	assert.NoError(t, viaAgents.Reachable(), "the agents are reached from any machine")

	agentsOnly, err := (&Client{Config: kube, Temporal: temporal}).LogSource()
	require.NoError(t, err)
	assert.Equal(t, &agentlogs.Reader{Client: temporal}, agentsOnly, "no files of a Kubernetes backend to read here")

	_, err = (&Client{Config: kube}).LogSource()
	assert.ErrorContains(t, err, "cannot read logs without a Temporal connection")
}
