package local

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/cluster"
)

// TestNoticeReachesTheWorker: a worker finds its notice where
// $TRAINQ_NOTICE_FILE says, whole, once it is given, and can exit on it.
func TestNoticeReachesTheWorker(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	spec := binarySpec("notice-job", `test ! -e "$TRAINQ_NOTICE_FILE" && echo no notice yet; echo looked; `+
		`while [ ! -e "$TRAINQ_NOTICE_FILE" ]; do sleep 0.02; done; echo "got $(cat "$TRAINQ_NOTICE_FILE")"; exit 0`)
	cleanupWorker(t, b, spec.ID)
	_, err := b.Start(ctx, spec)
	require.NoError(t, err)
	// The notice comes once the worker has looked: on a busy machine the
	// shell may start after a notice sent at once.
	require.Eventually(t, func() bool { return strings.Contains(logOf(t, b, spec.ID), "looked") }, time.Minute, 20*time.Millisecond,
		"the script looked for a notice")
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

// TestNoticeSignalReachesTheWorker: with a notice signal, the worker's
// processes get it after the notice is in place (a handler can read it);
// the supervisor survives it and records the exit. A worker that does not
// handle the signal gets its default action, and that exit is recorded too.
func TestNoticeSignalReachesTheWorker(t *testing.T) {
	ctx := ctxT(t)
	b := newBackend(t, t.TempDir())
	for _, tc := range []struct {
		name, script string
		code         int
		logs         string
	}{
		{"handled", `trap 'echo "got USR1: $(cat "$TRAINQ_NOTICE_FILE")"; exit 0' USR1; echo ready; while true; do sleep 0.05; done`,
			0, `got USR1: {"reason":"cancelled"}`},
		{"not handled", `echo ready; while true; do sleep 0.05; done`, 128 + 10, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := binarySpec("signal-"+strings.ReplaceAll(tc.name, " ", "-"), tc.script)
			cleanupWorker(t, b, spec.ID)
			_, err := b.Start(ctx, spec)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return strings.Contains(logOf(t, b, spec.ID), "ready") }, time.Minute, 20*time.Millisecond,
				"the script set its trap")
			require.NoError(t, b.Notice(ctx, spec.ID, []byte(`{"reason":"cancelled"}`+"\n")))
			require.NoError(t, b.NoticeSignal(ctx, spec.ID, "SIGUSR1"))
			st, err := b.Wait(ctx, spec.ID, nil)
			require.NoError(t, err)
			assert.Equal(t, tc.code, st.ExitCode)
			log := logOf(t, b, spec.ID)
			assert.Contains(t, log, tc.logs)
			assert.Contains(t, log, fmt.Sprintf("[trainq-supervisor] worker exited with code %d", tc.code), "the supervisor outlived the signal")
		})
	}
	other := binarySpec("signal-never-started", "true")
	assert.Error(t, b.NoticeSignal(ctx, other.ID, "SIGUSR1"))
	assert.ErrorContains(t, b.NoticeSignal(ctx, other.ID, "SIGKILL"), "not one of SIGUSR1, SIGUSR2, SIGHUP, SIGINT")
}
