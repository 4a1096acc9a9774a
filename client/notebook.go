package client

import (
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// NotebookRequest asks for a Jupyter server, in ML Space's words (the body
// of POST /notebooks; the flags of `trainq notebook start`).
type NotebookRequest struct {
	InstanceType   string            `json:"instance_type"`
	Region         string            `json:"region"`
	AllocationName string            `json:"allocation_name"`
	BaseImage      string            `json:"base_image"`
	JobDesc        string            `json:"job_desc"`
	PriorityClass  string            `json:"priority_class"`
	EnvVariables   map[string]string `json:"env_variables"`
	Script         string            `json:"script"`
	// QueueName is the allocation's queue (its default queue when empty).
	QueueName string `json:"queue_name"`
	// ShutdownIn is ML Space's shutdown_in: stop the server after this many
	// seconds of running (nil: never; must be positive).
	ShutdownIn *int64 `json:"shutdown_in"`
	// ShutdownAt is ML Space's shutdown_at: stop the server when this
	// 5-field cron expression (UTC) next matches ("": never).
	ShutdownAt string `json:"shutdown_at"`
	// Author is who starts it: the CLI's --author, the API's token user.
	Author string `json:"-"`
}

// NotebookFields are the JSON fields of a NotebookRequest.
var NotebookFields = []string{"instance_type", "region", "allocation_name", "base_image", "job_desc", "priority_class", "env_variables", "script",
	"queue_name", "shutdown_in", "shutdown_at"}

// NotebookSpec is the job spec of a Jupyter server: one worker running the
// notebook script unless another is given, on one GPU of the allocation's
// first GPU node family unless an instance type is given. Check (through
// JobSpec.Normalize) gives it high priority whatever was asked, checks
// shutdown_in and shutdown_at, and adds its queue's idle_timeout. With no
// config it leaves the instance type as asked: the request as sent.
func NotebookSpec(cfg *config.Config, r NotebookRequest) protocol.JobSpec {
	spec := protocol.JobSpec{
		Script: r.Script, BaseImage: r.BaseImage, InstanceType: r.InstanceType, Region: r.Region,
		AllocationName: r.AllocationName, NWorkers: 1, Type: "binary", PriorityClass: r.PriorityClass,
		JobDesc: r.JobDesc, EnvVariables: r.EnvVariables, Kind: scheduler.KindNotebook, Author: r.Author,
		QueueName: r.QueueName,
	}
	if r.ShutdownIn != nil || r.ShutdownAt != "" {
		// Checked by Check (JobSpec.Normalize), with the fields' names.
		spec.Autoshutdown = &protocol.NotebookShutdown{ShutdownIn: r.ShutdownIn, ShutdownAt: r.ShutdownAt}
	}
	if spec.Script == "" {
		spec.Script = protocol.NotebookScript
	}
	if spec.InstanceType == "" && cfg != nil {
		spec.InstanceType = cfg.DefaultNotebookInstance(spec.Region, spec.AllocationName)
	}
	return spec
}
