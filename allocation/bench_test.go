package allocation

import (
	"fmt"
	"testing"
	"time"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// The rules' cost over the pool's own: one job's life (request, pass that
// grants it, release) through the rules, next to the same calls on
// scheduler.Pool directly, on an allocation of 64 8-GPU nodes that keeps
// 256 one-GPU jobs waiting.
//
//	go test -run '^$' -bench . -benchmem ./allocation/

const benchNodes, benchBacklog = 64, 256

func benchState(b *testing.B) *State {
	in := input(benchNodes)
	s, err := New(in)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func benchReq(i int) protocol.CapacityRequest {
	return fixture.Request{Job: fmt.Sprintf("job-%d", i), Class: scheduler.Medium, GPUs: 1}.Capacity()
}

func BenchmarkJobLifeThroughRules(b *testing.B) {
	s := benchState(b)
	for i := range benchNodes*8 + benchBacklog {
		s.Request(benchReq(i), t0)
	}
	s.Pass(t0)
	next, oldest := benchNodes*8+benchBacklog, 0
	b.ResetTimer()
	for range b.N {
		s.Release(protocol.ReleaseSignal{Job: fmt.Sprintf("job-%d", oldest), Attempt: 1, Workers: []int{0}, Stopping: true})
		oldest++
		s.Request(benchReq(next), t0)
		next++
		if cmds := s.Pass(t0.Add(time.Second)); len(cmds) == 0 {
			b.Fatal("the pass granted nothing")
		}
	}
}

func BenchmarkJobLifeOnThePool(b *testing.B) {
	s := benchState(b)
	pool := s.Pool
	enqueue := func(i int) {
		r, err := RequestFor(pool, benchReq(i))
		if err == nil {
			r.Seq = int64(i + 1)
			err = pool.Enqueue(r)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	for i := range benchNodes*8 + benchBacklog {
		enqueue(i)
	}
	pool.Schedule(t0)
	next, oldest := benchNodes*8+benchBacklog, 0
	b.ResetTimer()
	for range b.N {
		job := fmt.Sprintf("job-%d", oldest)
		pool.BeginRelease(job)
		pool.Release(job, 1, 0)
		oldest++
		enqueue(next)
		next++
		if d := pool.Schedule(t0.Add(time.Second)); len(d.Grants) == 0 {
			b.Fatal("the pass granted nothing")
		}
	}
}
