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
	// Author is who starts it: the CLI's --author, the API's token user.
	Author string `json:"-"`
}

// NotebookFields are the JSON fields of a NotebookRequest.
var NotebookFields = []string{"instance_type", "region", "allocation_name", "base_image", "job_desc", "priority_class", "env_variables", "script"}

// NotebookSpec is the job spec of a Jupyter server: one worker running the
// notebook script unless another is given, on one GPU of the allocation's
// first GPU node family unless an instance type is given. Check (through
// JobSpec.Normalize) gives it high priority whatever was asked.
func NotebookSpec(cfg *config.Config, r NotebookRequest) protocol.JobSpec {
	spec := protocol.JobSpec{
		Script: r.Script, BaseImage: r.BaseImage, InstanceType: r.InstanceType, Region: r.Region,
		AllocationName: r.AllocationName, NWorkers: 1, Type: "binary", PriorityClass: r.PriorityClass,
		JobDesc: r.JobDesc, EnvVariables: r.EnvVariables, Kind: scheduler.KindNotebook, Author: r.Author,
	}
	if spec.Script == "" {
		spec.Script = protocol.NotebookScript
	}
	if spec.InstanceType == "" {
		spec.InstanceType = cfg.DefaultNotebookInstance(spec.Region, spec.AllocationName)
	}
	return spec
}
