package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

func TestCheckpointEndpoint(t *testing.T) {
	s, _ := twoWorkspaceServer(t)
	rec := post(s, "/public/v2/jobs/"+nbB+"/checkpoint", "")
	require.Equal(t, 200, rec.Code, rec.Body.String())
	var reply protocol.CheckpointReply
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &reply))
	assert.Equal(t, nbB, reply.Job)
	assert.Equal(t, 1, reply.Attempt, "no ?attempt means the current attempt")
	assert.False(t, reply.At.IsZero())

	for _, tc := range []struct {
		name, path string
		code       int
		field      string
		errCode    string
	}{
		{"a waiting job", "/public/v2/jobs/" + jobB + "/checkpoint", 409, "", codeNotRunning},
		{"another workspace's job", "/public/v2/jobs/" + jobA + "/checkpoint", 404, "", codeNotFound},
		{"attempt 0", "/public/v2/jobs/" + nbB + "/checkpoint?attempt=0", 422, "attempt", codeInvalidParam},
		{"attempt twice", "/public/v2/jobs/" + nbB + "/checkpoint?attempt=1&attempt=2", 422, "attempt", codeInvalidParam},
		{"unknown parameter", "/public/v2/jobs/" + nbB + "/checkpoint?at=now", 400, "at", codeInvalidParam},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := post(s, tc.path, "")
			require.Equal(t, tc.code, rec.Code, rec.Body.String())
			var body map[string]Error
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			assert.Equal(t, tc.errCode, body["error"].Code)
			assert.Equal(t, tc.field, body["error"].Field)
		})
	}
}

// nbB2 is a second running notebook of bob's, for the checkpoint limits.
const nbB2 = "jupyter-bbbbbbbb-0000-4000-8000-0000000000b2"

func addRunning(fb *fakeBackend, name, user, workspace string) {
	fb.add(client.JobInfo{JobName: name, Kind: "notebook", Author: user, Workspace: workspace, Running: true},
		protocol.JobStatus{State: protocol.StateRunning, Kind: scheduler.KindNotebook, Region: "SR006", Allocation: fakeAlloc, Attempt: 1})
}

// gatedBackend holds the checkpoints of one job until release is closed,
// and counts every job's checkpoint calls and how many are in flight.
type gatedBackend struct {
	*fakeBackend
	gated   string
	entered chan string
	release chan struct{}

	mu       sync.Mutex
	calls    map[string]int
	inFlight map[string]int
	most     map[string]int // the most in flight at once, per job
}

func newGatedBackend(fb *fakeBackend, gated string) *gatedBackend {
	return &gatedBackend{fakeBackend: fb, gated: gated, entered: make(chan string, 100), release: make(chan struct{}),
		calls: map[string]int{}, inFlight: map[string]int{}, most: map[string]int{}}
}

func (g *gatedBackend) Checkpoint(ctx context.Context, job string, attempt int, progress float64) (protocol.CheckpointReply, error) {
	g.mu.Lock()
	g.calls[job]++
	g.inFlight[job]++
	g.most[job] = max(g.most[job], g.inFlight[job])
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inFlight[job]--
		g.mu.Unlock()
	}()
	select {
	case g.entered <- job:
	default: // nobody is watching that many
	}
	if job == g.gated {
		<-g.release
	}
	return g.fakeBackend.Checkpoint(ctx, job, attempt, progress)
}

func (g *gatedBackend) counts(job string) (calls, most int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[job], g.most[job]
}

// recv waits for what ch sends; a test that waits longer than a
// generous bound has failed.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("waited 30 s for %s", what)
		panic("unreachable")
	}
}

// Checkpoints for one job asked while one is on its way are merged into
// it: one update reaches the allocator, and every caller gets its answer.
// Another job's checkpoint is not held up meanwhile.
func TestConcurrentCheckpointsOfAJobAreMerged(t *testing.T) {
	s, fb := twoWorkspaceServer(t)
	addRunning(fb, nbB2, "bob", teamB)
	g := newGatedBackend(fb, nbB)
	s.backend = g
	joined := make(chan string, 100)
	s.checkpointLimits().joined = func(job string) { joined <- job }

	const callers = 20
	answers := make(chan *httptest.ResponseRecorder, callers)
	for range callers {
		go func() { answers <- post(s, "/public/v2/jobs/"+nbB+"/checkpoint", "") }()
	}
	require.Equal(t, nbB, recv(t, g.entered, "the first checkpoint to reach the backend"))
	for range callers - 1 {
		require.Equal(t, nbB, recv(t, joined, "the other checkpoints to be merged into it"))
	}
	// nbB's checkpoint is still held: bob's other job is booked meanwhile.
	other := post(s, "/public/v2/jobs/"+nbB2+"/checkpoint", "")
	require.Equal(t, 200, other.Code, other.Body.String())
	require.Equal(t, nbB2, recv(t, g.entered, "bob's other job to reach the backend"))

	close(g.release)
	var first string
	for range callers {
		rec := <-answers
		require.Equal(t, 200, rec.Code, rec.Body.String())
		if first == "" {
			first = rec.Body.String()
		}
		assert.Equal(t, first, rec.Body.String(), "every merged caller gets the same answer")
	}
	var reply protocol.CheckpointReply
	require.NoError(t, json.Unmarshal([]byte(first), &reply))
	assert.Equal(t, nbB, reply.Job)
	calls, most := g.counts(nbB)
	assert.Equal(t, 1, calls, "one update for the merged checkpoints")
	assert.Equal(t, 1, most)

	// Once it is booked, the next checkpoint is a new update.
	rec := post(s, "/public/v2/jobs/"+nbB+"/checkpoint", "")
	require.Equal(t, 200, rec.Code, rec.Body.String())
	calls, most = g.counts(nbB)
	assert.Equal(t, 2, calls)
	assert.Equal(t, 1, most, "never two checkpoints of a job in flight at once")
}

// rateLimited checks a 429 of the checkpoint limits and returns its error.
func rateLimited(t *testing.T, rec *httptest.ResponseRecorder, retryAfter string) Error {
	t.Helper()
	require.Equal(t, 429, rec.Code, rec.Body.String())
	assert.Equal(t, retryAfter, rec.Header().Get("Retry-After"))
	var body map[string]Error
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	e := body["error"]
	assert.Equal(t, codeRateLimited, e.Code)
	return e
}

// A job that asks for more checkpoints than its limit is answered 429 with
// Retry-After, naming the limit; bob's other job is not limited by it, and
// the job may checkpoint again once the time has passed.
func TestCheckpointsPerJobAreLimited(t *testing.T) {
	s, fb := twoWorkspaceServer(t)
	addRunning(fb, nbB2, "bob", teamB)
	g := newGatedBackend(fb, "")
	s.backend = g
	lim := s.checkpointLimits()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	lim.now = func() time.Time { return now }

	path := "/public/v2/jobs/" + nbB + "/checkpoint"
	for i := range CheckpointsPerJob {
		rec := post(s, path, "")
		require.Equal(t, 200, rec.Code, "checkpoint %d: %s", i+1, rec.Body.String())
	}
	e := rateLimited(t, post(s, path, ""), "6")
	assert.Equal(t, "job_name", e.Field)
	assert.Equal(t, "too many checkpoints for this job: at most 10 a minute are booked for one job; try again in 6 s", e.Message)
	calls, _ := g.counts(nbB)
	assert.Equal(t, CheckpointsPerJob, calls, "a refused checkpoint does not reach the allocator")

	rec := post(s, "/public/v2/jobs/"+nbB2+"/checkpoint", "")
	assert.Equal(t, 200, rec.Code, "another job is not limited by nbB's flood: %s", rec.Body.String())

	now = now.Add(6 * time.Second)
	rec = post(s, path, "")
	assert.Equal(t, 200, rec.Code, rec.Body.String())
	rateLimited(t, post(s, path, ""), "6")
}

// A user who floods checkpoint requests, whatever the job, is answered 429
// once over the user's limit, before anything is asked of Temporal; another
// user is not limited by it.
func TestCheckpointRequestsPerUserAreLimited(t *testing.T) {
	s, fb := twoWorkspaceServer(t)
	addRunning(fb, nbB2, "bob", teamB)
	g := newGatedBackend(fb, "")
	s.backend = g
	lim := s.checkpointLimits()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	lim.now = func() time.Time { return now }

	path := "/public/v2/jobs/" + nbB + "/checkpoint"
	ok, limited := 0, 0
	for range CheckpointRequestsPerUser {
		switch rec := post(s, path, ""); rec.Code {
		case 200:
			ok++
		case 429:
			limited++
		default:
			t.Fatalf("answered %d: %s", rec.Code, rec.Body)
		}
	}
	assert.Equal(t, CheckpointsPerJob, ok)
	assert.Equal(t, CheckpointRequestsPerUser-CheckpointsPerJob, limited)
	e := rateLimited(t, post(s, "/public/v2/jobs/"+nbB2+"/checkpoint", ""), "1")
	assert.Equal(t, "too many checkpoint requests: one user may send at most 120 a minute to this API server; try again in 1 s", e.Message)
	assert.Empty(t, e.Field)

	rec := post(s, "/public/v2/jobs/"+jobA+"/checkpoint", "", "Authorization", "Bearer "+aliceTok)
	assert.Equal(t, 200, rec.Code, "alice is not limited by bob's flood: %s", rec.Body.String())
}

// The limiter forgets the jobs and users it no longer limits.
func TestCheckpointLimiterForgetsIdleKeys(t *testing.T) {
	l := newCheckpointLimiter()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	book := func() (protocol.CheckpointReply, error) { return protocol.CheckpointReply{}, nil }
	for i := range 3 * minSweep {
		_, err := l.do(context.Background(), fmt.Sprintf("job-%d", i), 0, book)
		require.NoError(t, err)
		now = now.Add(time.Second)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// A job's bucket is full again 6 s after its checkpoint.
	assert.LessOrEqual(t, len(l.jobs), minSweep)
}

// The OpenAPI document states the checkpoint limits the server applies.
func TestOpenAPINamesTheCheckpointLimits(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Description string `json:"description"`
			} `json:"responses"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(openapiJSON, &doc))
	desc := doc.Paths["/public/v2/jobs/{job_name}/checkpoint"]["post"].Responses["429"].Description
	assert.Contains(t, desc, fmt.Sprintf("at most %d a minute are booked for one job", CheckpointsPerJob))
	assert.Contains(t, desc, fmt.Sprintf("at most %d checkpoint requests a minute", CheckpointRequestsPerUser))
	assert.Contains(t, desc, codeRateLimited)
}
