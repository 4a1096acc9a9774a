package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
)

// Shape is what makes jobs alike for learned runtime estimates: their kind, type, script,
// instance type and workers (the workspace is a search attribute of its own). Two jobs of one
// shape are expected to run about as long. It is a short hash, so that a long script costs the
// visibility store little; TrainqShape carries it.
func (s *JobSpec) Shape() string {
	most, _ := s.GangSize()
	h := sha256.New()
	for _, part := range []string{string(s.Kind), s.Type, s.Script, s.InstanceType, strconv.Itoa(most)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// RuntimeEstimate is how long a job without a time limit is expected to run in all, learned
// from the finished jobs like it (scheduler.LearnedRuntime), and what it was learned from.
type RuntimeEstimate struct {
	Runtime time.Duration `json:"runtime"`
	// Runs is how many completed jobs it was learned from.
	Runs int `json:"runs"`
	// Basis says which jobs those are, for people: "jobs of this shape" (its kind, type,
	// script, instance type and workers) or "medium 2-GPU jobs".
	Basis string `json:"basis"`
	// Workspace is the workspace whose jobs they are.
	Workspace string `json:"workspace,omitempty"`
}

// String is the estimate for people: "about 42m0s: 90% of the last 12 completed jobs of this
// shape in workspace ws ran no longer".
func (e RuntimeEstimate) String() string {
	in := ""
	if e.Workspace != "" {
		in = " in workspace " + e.Workspace
	}
	return fmt.Sprintf("about %s: 90%% of the last %d completed %s%s ran no longer",
		e.Runtime.Round(time.Second), e.Runs, e.Basis, in)
}

// EstimateRuntimeInput asks for a job's learned runtime estimate.
type EstimateRuntimeInput struct {
	Workspace string `json:"workspace"`
	Shape     string `json:"shape"`
	Class     string `json:"class"`
	GPUs      int    `json:"gpus"`
}
