package client

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/trainq/trainq/protocol"
)

// A job is told of its attempt's first checkpoint, of the first since a
// notice (it honours the notice), and then of one every
// checkpointSignalEvery, so that frequent checkpoints cannot spend the
// signals of the job's run.
func TestCheckpointsTellTheJobSparingly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	status := func(a protocol.AttemptRecord) protocol.JobStatus {
		a.Number = 2
		return protocol.JobStatus{Attempts: []protocol.AttemptRecord{{Number: 1, CheckpointAt: at(0)}, a}}
	}
	now := t0.Add(time.Hour)
	for _, tc := range []struct {
		name string
		a    protocol.AttemptRecord
		want bool
	}{
		{"the attempt's first", protocol.AttemptRecord{}, true},
		{"soon after the last", protocol.AttemptRecord{CheckpointAt: at(55 * time.Minute)}, false},
		{"long after the last", protocol.AttemptRecord{CheckpointAt: at(50 * time.Minute)}, true},
		{"the first since a notice", protocol.AttemptRecord{CheckpointAt: at(58 * time.Minute), NoticedAt: at(59 * time.Minute)}, true},
		{"a second one during a notice", protocol.AttemptRecord{CheckpointAt: at(59*time.Minute + 30*time.Second), NoticedAt: at(59 * time.Minute)}, false},
	} {
		assert.Equal(t, tc.want, tellsJob(status(tc.a), 2, now), tc.name)
	}
	assert.True(t, tellsJob(protocol.JobStatus{}, 3, now), "an attempt the status does not show yet")
}
