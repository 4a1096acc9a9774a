package local

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/cluster"
)

// TestNoticeReachesTheWorker: a worker finds its notice where
// $TRAINQ_NOTICE_FILE says, whole, once it is given, and can exit on it.
func TestNoticeReachesTheWorker(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	spec := binarySpec("notice-job", `test ! -e "$TRAINQ_NOTICE_FILE" && echo no notice yet; `+
		`while [ ! -e "$TRAINQ_NOTICE_FILE" ]; do sleep 0.02; done; echo "got $(cat "$TRAINQ_NOTICE_FILE")"; exit 0`)
	cleanupWorker(t, b, spec.ID)
	_, err := b.Start(ctx, spec)
	require.NoError(t, err)
	require.NoError(t, b.Notice(ctx, spec.ID, []byte(`{"reason":"preempted","deadline":"2026-12-01T00:00:00Z"}`+"\n")))
	st, err := b.Wait(ctx, spec.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, st.ExitCode)
	log := logOf(t, b, spec.ID)
	assert.Contains(t, log, "no notice yet")
	assert.Contains(t, log, `got {"reason":"preempted","deadline":"2026-12-01T00:00:00Z"}`)

	other := binarySpec("never-started", "true")
	err = b.Notice(ctx, other.ID, []byte("{}"))
	assert.True(t, errors.Is(err, cluster.ErrNotFound), "a worker that never started: %v", err)
}
