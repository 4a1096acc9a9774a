package tempcluster

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// psqlCommand is psql running one statement against p's postgres database.
func psqlCommand(ctx context.Context, p *Postgres, sql string) *exec.Cmd {
	return p.command(ctx, "psql", "-h", "127.0.0.1", "-p", strconv.Itoa(p.port), "-U", "temporal",
		"-d", "postgres", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql)
}

// psql runs one statement against p's postgres database and returns its
// unaligned output.
func psql(ctx context.Context, t *testing.T, p *Postgres, sql string) string {
	t.Helper()
	out, err := psqlCommand(ctx, p, sql).CombinedOutput()
	require.NoError(t, err, "psql -c %q: %s", sql, out)
	return strings.TrimSpace(string(out))
}

// TestPostgresCrashKeepsCommittedWrites: what another session has seen
// committed is still there after a crash (Crash, the chaos campaign's
// PostgreSQL fault) and crash recovery. Temporal's services act on what
// the database acknowledged (a task handed on, an ack level moved), so a
// database that forgets acknowledged commits leaves them ahead of it: a
// workflow task the history service scheduled and matching never has, whose
// workflow then waits for ever. With synchronous_commit=off a crash loses
// up to three wal_writer_delay of acknowledged commits, which this test
// catches while a writer commits one row at a time.
func TestPostgresCrashKeepsCommittedWrites(t *testing.T) {
	if os.Getenv("TRAINQ_SKIP_E2E") != "" {
		t.Skip("TRAINQ_SKIP_E2E is set")
	}
	postgresOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := newPostgres(ctx, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(p.Remove)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(p.Stop)
	psql(ctx, t, p, "CREATE TABLE committed (n bigint PRIMARY KEY)")

	for round := 1; round <= 5; round++ {
		// A writer commits rows 1, 2, 3, ... one transaction each, a few
		// milliseconds apart, as Temporal's services write: too slowly to
		// fill a WAL page between the WAL writer's rounds.
		start := psql(ctx, t, p, "SELECT coalesce(max(n), 0) FROM committed")
		writer := psqlCommand(ctx, p,
			"DO $$ BEGIN FOR i IN "+start+"+1.."+start+"+100000000 LOOP INSERT INTO committed VALUES (i); COMMIT; PERFORM pg_sleep(0.003); END LOOP; END $$")
		require.NoError(t, writer.Start())
		// Once it is well under way, read what is committed and crash at once.
		var seen int64
		for seen <= mustInt(t, start)+200 {
			require.NoError(t, ctx.Err(), "the writer commits")
			seen = mustInt(t, psql(ctx, t, p, "SELECT coalesce(max(n), 0) FROM committed"))
		}
		p.Crash()
		_ = writer.Wait()

		require.NoError(t, p.Start(ctx))
		after := mustInt(t, psql(ctx, t, p, "SELECT coalesce(max(n), 0) FROM committed"))
		t.Logf("round %d: row %d seen committed before the crash, %d rows after crash recovery", round, seen, after)
		require.GreaterOrEqual(t, after, seen, "round %d: the crash lost commits another session had seen", round)
	}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}
