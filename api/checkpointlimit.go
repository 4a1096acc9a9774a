package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/trainq/trainq/protocol"
)

// A checkpoint is an update on the allocator workflow that every job of the
// allocation shares, and Temporal lets a workflow have only a few updates
// in flight: a flood of checkpoints for one job would hold up everyone
// else's, and the allocator's own updates. So the API server lets one
// checkpoint per job be on its way at a time (one asked meanwhile for the
// same job and attempt gets the same answer), and limits how often a job,
// and a user, may ask. The limits hold per API server process.
const (
	// CheckpointsPerJob checkpoints a minute, in bursts of as many, may be
	// booked for one job; the requests merged into one on its way count once.
	CheckpointsPerJob = 10
	// CheckpointRequestsPerUser checkpoint requests a minute, in bursts of
	// as many, may come from one user, whatever their jobs.
	CheckpointRequestsPerUser = 120

	codeRateLimited = "rate_limited"
)

// rateLimit is a token bucket: burst requests at once, then one each every.
type rateLimit struct {
	burst int
	every time.Duration
}

func perMinute(n int) rateLimit { return rateLimit{burst: n, every: time.Minute / time.Duration(n)} }

// bucket is what a rateLimit has left for one key.
type bucket struct {
	tokens float64
	at     time.Time
}

// refill brings b up to now.
func (l rateLimit) refill(b *bucket, now time.Time) {
	if b.at.IsZero() {
		b.tokens, b.at = float64(l.burst), now
		return
	}
	if now.After(b.at) {
		b.tokens = math.Min(float64(l.burst), b.tokens+float64(now.Sub(b.at))/float64(l.every))
		b.at = now
	}
}

// take spends a token of b, or says how long until there is one.
func (l rateLimit) take(b *bucket, now time.Time) (ok bool, wait time.Duration) {
	l.refill(b, now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) * float64(l.every))
}

// full says whether b is back to a full burst: forgetting it changes nothing.
func (l rateLimit) full(b *bucket, now time.Time) bool {
	l.refill(b, now)
	return b.tokens >= float64(l.burst)
}

// flight is a checkpoint on its way to the allocator.
type flight struct {
	attempt int
	done    chan struct{}
	reply   protocol.CheckpointReply
	err     error
}

type jobSlot struct {
	bucket
	flight *flight
}

// checkpointLimiter holds the checkpoint limits of one Server.
type checkpointLimiter struct {
	perJob, perUser rateLimit
	now             func() time.Time
	// joined, if set, is called when a request is merged into one on its way.
	joined func(job string)

	mu    sync.Mutex
	jobs  map[string]*jobSlot
	users map[string]*bucket
	// sweepAt is the number of keys at which idle ones are forgotten.
	sweepAt int
}

const minSweep = 1024

func newCheckpointLimiter() *checkpointLimiter {
	return &checkpointLimiter{perJob: perMinute(CheckpointsPerJob), perUser: perMinute(CheckpointRequestsPerUser), now: time.Now,
		jobs: map[string]*jobSlot{}, users: map[string]*bucket{}, sweepAt: minSweep}
}

// checkpointLimiters holds each Server's limiter (the Server itself has no
// field for it), without keeping a Server alive.
var checkpointLimiters sync.Map // weak.Pointer[Server] -> *checkpointLimiter

func (s *Server) checkpointLimits() *checkpointLimiter {
	key := weak.Make(s)
	if l, ok := checkpointLimiters.Load(key); ok {
		return l.(*checkpointLimiter)
	}
	l, loaded := checkpointLimiters.LoadOrStore(key, newCheckpointLimiter())
	if !loaded {
		runtime.AddCleanup(s, func(k weak.Pointer[Server]) { checkpointLimiters.Delete(k) }, key)
	}
	return l.(*checkpointLimiter)
}

// retryAfter is wait in whole seconds, at least one.
func retryAfter(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}

// admitUser spends one of the principal's checkpoint requests.
func (l *checkpointLimiter) admitUser(p Principal) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	key := p.User + "\x00" + p.Workspace
	b, ok := l.users[key]
	if !ok {
		l.sweep(now)
		b = &bucket{}
		l.users[key] = b
	}
	if ok, wait := l.perUser.take(b, now); !ok {
		ra := retryAfter(wait)
		return &Error{Status: http.StatusTooManyRequests, Code: codeRateLimited, RetryAfter: ra,
			Message: fmt.Sprintf("too many checkpoint requests: one user may send at most %d a minute to this API server; try again in %d s",
				l.perUser.burst, ra)}
	}
	return nil
}

// do books a checkpoint of job with call, unless one for the same attempt
// is on its way: then it waits for that one's answer. One for another
// attempt on its way is waited for first. Only a call that goes to the
// allocator counts against the job's limit. call runs on a context of its
// own, so that the requests merged into it do not depend on the first
// one's client staying connected.
func (l *checkpointLimiter) do(ctx context.Context, job string, attempt int, call func() (protocol.CheckpointReply, error)) (protocol.CheckpointReply, error) {
	for {
		l.mu.Lock()
		now := l.now()
		slot, ok := l.jobs[job]
		if !ok {
			l.sweep(now)
			slot = &jobSlot{}
			l.jobs[job] = slot
		}
		if f := slot.flight; f != nil {
			l.mu.Unlock()
			if f.attempt == attempt && l.joined != nil {
				l.joined(job)
			}
			select {
			case <-f.done:
			case <-ctx.Done():
				return protocol.CheckpointReply{}, ctx.Err()
			}
			if f.attempt == attempt {
				return f.reply, f.err
			}
			continue
		}
		if ok, wait := l.perJob.take(&slot.bucket, now); !ok {
			l.mu.Unlock()
			ra := retryAfter(wait)
			return protocol.CheckpointReply{}, &Error{Status: http.StatusTooManyRequests, Code: codeRateLimited, Field: "job_name", RetryAfter: ra,
				Message: fmt.Sprintf("too many checkpoints for this job: at most %d a minute are booked for one job; try again in %d s",
					l.perJob.burst, ra)}
		}
		f := &flight{attempt: attempt, done: make(chan struct{}), err: errors.New("the checkpoint was not booked")}
		slot.flight = f
		l.mu.Unlock()
		func() {
			defer func() {
				l.mu.Lock()
				slot.flight = nil
				l.mu.Unlock()
				close(f.done)
			}()
			f.reply, f.err = call()
		}()
		return f.reply, f.err
	}
}

// sweep forgets the jobs and users whose buckets are full again and that
// have nothing on its way, once there are many: the maps stay as large as
// the recent callers. l.mu is held.
func (l *checkpointLimiter) sweep(now time.Time) {
	if len(l.jobs)+len(l.users) < l.sweepAt {
		return
	}
	for k, slot := range l.jobs {
		if slot.flight == nil && l.perJob.full(&slot.bucket, now) {
			delete(l.jobs, k)
		}
	}
	for k, b := range l.users {
		if l.perUser.full(b, now) {
			delete(l.users, k)
		}
	}
	l.sweepAt = max(minSweep, 2*(len(l.jobs)+len(l.users)))
}
