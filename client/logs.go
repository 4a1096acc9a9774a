package client

import (
	"errors"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/cluster/agentlogs"
	"github.com/trainq/trainq/cluster/local/logfile"
	"github.com/trainq/trainq/config"
)

// LogSource reads the logs of a job's workers, wherever they run, in chunks
// by byte offset (cluster.LogRequest names the worker and the node it ran
// on), and says before the first read whether it can read anything from
// this machine (Reachable). It is the one seam between the log readers
// (joblogs, and through it `trainq logs` and GET /jobs/{job_name}/logs) and
// the cluster backends:
//
//   - agentlogs.Reader reads a log through the agent of the worker's node
//     (a short workflow whose activity asks the node's backend), from any
//     machine and for any backend;
//   - the backend's host logs (hostLogs) are read here first when the
//     backend leaves them on the machines it runs on: the local backend's
//     files under the data dir (logfile.Source, without the backend's
//     process code); the Kubernetes backend leaves none.
//
// A chunk request is safe to repeat, so a source may keep no state.
type LogSource = cluster.LogSource

// hostLogs is, per backend (config.Backend), the reader of the worker logs
// that backend leaves on a machine, for a process that does not run the
// backend; a backend without one is read through the node agents alone.
var hostLogs = map[string]func(cfg *config.Config) LogSource{
	config.BackendLocal: func(cfg *config.Config) LogSource { return logfile.Source{DataDir: cfg.DataDir} },
}

// LogSource returns where this client reads workers' logs: the Logs field
// when set; else, with a Temporal connection, an agentlogs.Reader that
// reads a worker's log from the backend's host logs when this machine has
// them and through the agent of the worker's node otherwise; else the host
// logs alone.
func (c *Client) LogSource() (LogSource, error) {
	if c.Logs != nil {
		return c.Logs, nil
	}
	var host LogSource
	if cfg := c.config(); cfg != nil {
		if hl := hostLogs[cfg.Backend]; hl != nil {
			host = hl(cfg)
		}
	}
	switch {
	case c.Temporal != nil && host != nil:
		return &agentlogs.Reader{Client: c.Temporal, Local: host}, nil
	case c.Temporal != nil:
		return &agentlogs.Reader{Client: c.Temporal}, nil
	case host != nil:
		return host, nil
	}
	return nil, errors.New("no configuration, or a backend whose logs are read only through its nodes' agents: cannot read logs without a Temporal connection")
}
