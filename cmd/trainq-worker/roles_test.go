package main

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/config"
)

func TestParseArgsRoles(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want options
	}{
		{nil, options{role: roleAll}},
		{[]string{"--config", "c.yaml"}, options{role: roleAll, configPath: "c.yaml"}},
		{[]string{"--agents=true"}, options{role: roleAll}},
		{[]string{"--agents=false", "--config=c.yaml"}, options{role: roleWorkflows, configPath: "c.yaml"}},
		{[]string{"agent", "--node", "a", "--node", "b,c", "--node", "a"}, options{role: roleAgent, nodes: []string{"a", "b", "c"}}},
		{[]string{"agent", "--nodes-from-host", "--config", "c.yaml"}, options{role: roleAgent, nodesFromHost: true, configPath: "c.yaml"}},
		{[]string{"--config", "c.yaml", "agent", "--node", "a"}, options{role: roleAgent, nodes: []string{"a"}, configPath: "c.yaml"}},
		{[]string{"agent", "--node", "a", "--metrics-addr", ":9465"}, options{role: roleAgent, nodes: []string{"a"}, metricsAddr: ":9465"}},
	} {
		got, err := parseArgs(tc.args)
		require.NoError(t, err, "%v", tc.args)
		assert.Equal(t, tc.want, got, "%v", tc.args)
	}
}

func TestParseArgsErrorsArePlainSentences(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "there is no flag --bogus; run `trainq-worker --help` for usage"},
		{[]string{"--node", "a"}, "--node is a flag of `trainq-worker agent`; run `trainq-worker --help` for usage"},
		{[]string{"--agents=maybe"}, `--agents: "maybe" is not true or false`},
		{[]string{"nodes"}, `"nodes" is not a trainq-worker role`},
		{[]string{"agent"}, "agent: say which nodes to serve, with --node NAME (repeatable) or --nodes-from-host"},
		{[]string{"agent", "--node"}, "agent: --node needs a value"},
		{[]string{"agent", "--node", "a", "--nodes-from-host"}, "agent: give either --node or --nodes-from-host, not both"},
		{[]string{"agent", "--node", "a", "b"}, `agent: unexpected argument "b"`},
		{[]string{"agent", "--agents=false", "--node", "a"}, "agent: --agents is not a flag of `trainq-worker agent`"},
		{[]string{"--agents=false", "agent", "--node", "a"}, "--agents is not a flag of `trainq-worker agent`"},
	} {
		_, err := parseArgs(tc.args)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error(), tc.want, "%v", tc.args)
		assert.NotContains(t, err.Error(), "flag provided but not defined", "%v", tc.args)
	}
	_, err := parseArgs([]string{"agent", "--help"})
	assert.True(t, errors.Is(err, flag.ErrHelp))
	_, err = parseArgs([]string{"-h"})
	assert.True(t, errors.Is(err, flag.ErrHelp))
}

func TestAgentNodes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
regions:
  - name: R
    allocations:
      - name: default
        nodes:
          - {name: gpu7, family: a100, gpus: 2}
          - {name: gpu7-b, family: a100, gpus: 2}
          - {name: gpu7b, family: a100, gpus: 2}
          - {name: gpu70-a, family: a100, gpus: 2}
          - {name: other, family: a100, gpus: 2}
`), 0o644))
	cfg, err := config.Load(path)
	require.NoError(t, err)

	got, err := agentNodes(cfg, []string{"other", "gpu7"}, false, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"other", "gpu7"}, got)

	_, err = agentNodes(cfg, []string{"gpu7", "gpu9"}, false, "")
	require.Error(t, err)
	assert.Equal(t, `node "gpu9" is not in the config (`+path+`); configured nodes: gpu7, gpu7-b, gpu7b, gpu70-a, other`, err.Error())
	_, err = agentNodes(cfg, []string{"x", "y"}, false, "")
	assert.ErrorContains(t, err, `nodes "x", "y" are not in the config`)

	got, err = agentNodes(cfg, nil, true, "gpu7")
	require.NoError(t, err)
	assert.Equal(t, []string{"gpu7", "gpu7-b"}, got, "the hostname itself and hostname-…, not gpu7b or gpu70-a")

	_, err = agentNodes(cfg, nil, true, "gpu8")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `no node of the config (`+path+`) is named after this host "gpu8"`)
	assert.Contains(t, err.Error(), "configured nodes: gpu7, gpu7-b, gpu7b, gpu70-a, other")
}
