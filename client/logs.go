package client

import (
	"errors"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/cluster/agentlogs"
	"github.com/trainq/trainq/cluster/local/logfile"
)

// LogSource reads the logs of a job's workers, wherever they run, in chunks
// by byte offset (cluster.LogRequest names the worker and the node it ran
// on). It is the one seam between the log readers (joblogs, and through it
// `trainq logs` and GET /jobs/{job_name}/logs) and the cluster backends:
//
//   - logfile.Source reads the files the local backend writes under the
//     data dir, without the backend's process code: what LogSource returns
//     by default, for a CLI or API on the machine (or the shared directory)
//     where trainq-worker runs;
//   - agentlogs.Reader reads them through each node's agent (a short
//     workflow whose activity runs on the node's queue), from any machine;
//   - *local.Backend and the Kubernetes backend read their own.
//
// A chunk request is safe to repeat, so a source may keep no state.
type LogSource = cluster.LogReader

var _ LogSource = logfile.Source{}

// LogSource returns where this client reads workers' logs: the Logs field
// when set; else, with a Temporal connection, an agentlogs.Reader that
// reads a worker's log from the files under the configured data dir when
// this machine has them (the dir may not exist yet: no worker has run
// here) and through the agent of the worker's node otherwise (any
// backend, from any machine); else the files alone.
func (c *Client) LogSource() (LogSource, error) {
	if c.Logs != nil {
		return c.Logs, nil
	}
	var files LogSource
	if c.config() != nil {
		files = logfile.Source{DataDir: c.config().DataDir}
	}
	switch {
	case c.Temporal != nil:
		return &agentlogs.Reader{Client: c.Temporal, Local: files}, nil
	case files != nil:
		return files, nil
	}
	return nil, errors.New("no configuration: cannot tell where the logs are")
}
