package api

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// uiBenchPool is an allocation of 1,000 nodes of 8 GPUs with 5,000 running
// jobs (3,000 of 1 GPU, 2,000 of 2 GPUs: 7,000 GPUs held) of 20 workspaces,
// and 10,000 waiting jobs, built in the scheduler directly.
func uiBenchPool(b *testing.B) (*scheduler.Pool, time.Time) {
	b.Helper()
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	nodes := make([]scheduler.Node, 1000)
	for i := range nodes {
		nodes[i] = scheduler.Node{Name: fmt.Sprintf("node-%04d", i+1), Family: "a100plus", GPUs: 8, CPU: 96, RAMGB: 768}
	}
	p, err := scheduler.NewPool(nodes, scheduler.Policy{})
	if err != nil {
		b.Fatal(err)
	}
	d1, _ := scheduler.ParseInstanceType("a100plus.1gpu.80vG.12C.96G")
	d2, _ := scheduler.ParseInstanceType("a100plus.2gpu.80vG.24C.192G")
	d8, _ := scheduler.ParseInstanceType("a100plus.8gpu.80vG.96C.768G")
	classes := []scheduler.Class{scheduler.Low, scheduler.Medium, scheduler.High}
	for k := range 5000 {
		d := d1
		if k%5 >= 3 {
			d = d2
		}
		if err := p.Enqueue(scheduler.Request{Job: fmt.Sprintf("lm-mpi-job-run-%05d", k), Kind: scheduler.KindJob, Class: classes[k%3],
			Demand: d, Workers: 1, Seq: int64(k), SubmittedAt: t0, Workspace: fmt.Sprintf("ws-%02d", k%20)}); err != nil {
			b.Fatal(err)
		}
	}
	now := t0.Add(time.Minute)
	if d := p.Schedule(now); len(d.Grants) != 5000 {
		b.Fatalf("setup: %d grants", len(d.Grants))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 10000 {
		if err := p.Enqueue(scheduler.Request{Job: fmt.Sprintf("lm-mpi-job-wait-%05d", i), Kind: scheduler.KindJob, Class: scheduler.Low,
			Demand: d8, Workers: 1 + rng.IntN(4), Seq: int64(10000 + i), SubmittedAt: now, Workspace: fmt.Sprintf("ws-%02d", i%20)}); err != nil {
			b.Fatal(err)
		}
	}
	p.Schedule(now.Add(time.Minute))
	return p, now
}

// queueViewOf is what the allocator's queue query answers for a page.
func queueViewOf(p *scheduler.Pool, offset, limit int) protocol.QueueView {
	by := p.WaitingByClass()
	return protocol.QueueView{Region: "R", Allocation: "big", View: p.ViewPage(offset, limit), Offset: offset, Limit: limit,
		WaitingTotal: by[0] + by[1] + by[2], WaitingByClass: map[string]int{"low": by[0], "medium": by[1], "high": by[2]}}
}

// BenchmarkUIData measures what trainq-api does for each of the
// dashboard's answers, after the allocator's query (whose view the
// scheduler's BenchmarkViewPage measures): turning the view into the
// answer, with a user's redaction, and encoding it. bytes/answer is the
// JSON's size, gzip-bytes/answer what the UI's routes send a browser (they
// gzip; the queue route does not).
//
//	go test -run '^$' -bench BenchmarkUIData -benchmem ./api/
func BenchmarkUIData(b *testing.B) {
	p, now := uiBenchPool(b)
	user := Principal{User: "u", Workspace: "ws-00", Role: RoleUser}
	s := &Server{}

	b.Run("gpus", func(b *testing.B) {
		v := queueViewOf(p, 0, 1)
		var size int
		var last uiGPUsView
		b.ReportAllocs()
		for b.Loop() {
			rd := s.redactor(user)
			for _, run := range v.Running {
				if user.CanSee(run.Workspace) {
					rd.know(run.Job)
				} else {
					rd.hide(run.Job)
				}
			}
			last = gpuGrid(v, user, rd)
			var buf bytes.Buffer
			if err := json.NewEncoder(&buf).Encode(last); err != nil {
				b.Fatal(err)
			}
			size = buf.Len()
		}
		b.ReportMetric(float64(size), "bytes/answer")
		b.ReportMetric(float64(gzipped(b, last)), "gzip-bytes/answer")
	})

	b.Run("queue-page-50", func(b *testing.B) {
		v := queueViewOf(p, 0, 50)
		page := protocol.QueuePage{Limit: 50}
		var size int
		b.ReportAllocs()
		for b.Loop() {
			rd := s.redactor(user)
			for _, run := range v.Running {
				if user.CanSee(run.Workspace) {
					rd.know(run.Job)
				} else {
					rd.hide(run.Job)
				}
			}
			for _, w := range v.Waiting {
				rd.hide(w.Job)
			}
			out := redactedQueue(v, page, rd)
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetIndent("", "  ") // as writeJSON answers
			if err := enc.Encode(&out); err != nil {
				b.Fatal(err)
			}
			size = buf.Len()
		}
		b.ReportMetric(float64(size), "bytes/answer")
	})

	// The timeline of 1,000 jobs over 24 hours, each with 1 to 3 attempts
	// of 1 or 2 workers, a third of the ended attempts preempted.
	b.Run("timeline-1000-jobs", func(b *testing.B) {
		jobs, statuses := timelineBenchJobs(now)
		from := now.Add(-24 * time.Hour)
		var size, bars int
		var last []uiBar
		b.ReportAllocs()
		for b.Loop() {
			rd := s.redactor(user)
			for _, j := range jobs {
				if user.CanSee(j.Workspace) {
					rd.know(j.JobName)
				} else {
					rd.hide(j.JobName)
				}
			}
			out := timelineBars(jobs, statuses, from, rd)
			last = out
			var buf bytes.Buffer
			if err := json.NewEncoder(&buf).Encode(out); err != nil {
				b.Fatal(err)
			}
			size, bars = buf.Len(), len(out)
		}
		b.ReportMetric(float64(size), "bytes/answer")
		b.ReportMetric(float64(gzipped(b, last)), "gzip-bytes/answer")
		b.ReportMetric(float64(bars), "bars")
	})
}

// gzipped is the size of v's JSON as writeCompactJSON sends it gzipped.
func gzipped(b *testing.B, v any) int {
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err := json.NewEncoder(gz).Encode(v); err != nil {
		b.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		b.Fatal(err)
	}
	return buf.Len()
}

func timelineBenchJobs(now time.Time) ([]client.JobSummary, []*protocol.JobStatus) {
	rng := rand.New(rand.NewPCG(3, 4))
	var jobs []client.JobSummary
	var statuses []*protocol.JobStatus
	for k := range 1000 {
		name := fmt.Sprintf("lm-mpi-job-tl-%04d", k)
		jobs = append(jobs, client.JobSummary{JobName: name, Workspace: fmt.Sprintf("ws-%02d", k%20)})
		st := &protocol.JobStatus{JobName: name, Priority: []string{"low", "medium", "high"}[k%3], Kind: scheduler.KindJob}
		start := now.Add(-time.Duration(rng.Int64N(int64(24 * time.Hour))))
		workers := 1 + rng.IntN(2)
		st.GPUs = 2 * workers
		for a := 1; a <= 1+rng.IntN(3); a++ {
			s := start
			e := s.Add(time.Duration(rng.Int64N(int64(2 * time.Hour))))
			rec := protocol.AttemptRecord{Number: a, QueuedAt: s, StartedAt: &s}
			for w := range workers {
				rec.Placement = append(rec.Placement, scheduler.WorkerPlacement{Worker: w, Node: fmt.Sprintf("node-%04d", rng.IntN(1000)+1), GPUs: []int{0, 1}})
			}
			if e.Before(now) {
				rec.EndedAt = &e
				rec.EndReason = "all workers exited with code 0"
				if a%3 == 1 {
					pre := fmt.Sprintf("lm-mpi-job-tl-%04d", rng.IntN(1000))
					rec.Preemptor = &scheduler.Preemptor{Job: pre, Class: scheduler.High}
					rec.EndReason = "preempted by " + pre + " (high job)"
				}
			}
			st.Attempts = append(st.Attempts, rec)
			start = e.Add(time.Minute)
		}
		statuses = append(statuses, st)
	}
	return jobs, statuses
}
