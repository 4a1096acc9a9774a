package protocol

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/scheduler"
)

// ParseSpec normalises as Normalize does and keeps what it parsed: the
// checked spec answers its demand and class without the strings, and a
// class changed through SetClass changes both forms.
func TestParseSpecKeepsWhatItParsed(t *testing.T) {
	raw := JobSpec{Script: "train.py", InstanceType: "a100plus.8gpu.80vG.96C.768G", NWorkers: 2, PriorityClass: "shared-low", ShmSizeClass: "small"}
	c, _, err := ParseSpec(raw)
	require.NoError(t, err)
	normalized := raw
	_, err = normalized.Normalize()
	require.NoError(t, err)
	assert.Equal(t, normalized, c.JobSpec, "the durable form is Normalize's")

	c.InstanceType = "not parsed again"
	assert.Equal(t, scheduler.Demand{Family: "a100plus", GPUs: 8, VRAMGB: 80, CPU: 96, RAMGB: 768}, c.Demand())
	assert.Equal(t, 16, c.GPUs())
	assert.Equal(t, 16*8, c.ShmGB())
	assert.Equal(t, scheduler.Low, c.Class())
	c.SetClass(scheduler.High)
	assert.Equal(t, scheduler.High, c.Class())
	assert.Equal(t, "high", c.PriorityClass)

	c.ProcessesPerWorker = 97
	fe := new(FieldError)
	require.ErrorAs(t, c.CheckLimits(), &fe)
	assert.Equal(t, "processes_per_worker", fe.Field)
	assert.Contains(t, fe.Message, "at most 96, its CPU cores", "the limit comes from the demand parsed")

	_, _, err = ParseSpec(JobSpec{Script: "x", InstanceType: "a100.eightgpu"})
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "instance_type", fe.Field)
	assert.Contains(t, fe.Message, "expected <family>.<N>gpu", "the error shows the forms allowed")
}
