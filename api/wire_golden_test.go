package api

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"github.com/trainq/trainq/internal/golden"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// updateWire rewrites api/testdata/wire from the answers of the code as it
// is: run it only when a change of the public JSON is intended.
var updateWire = flag.Bool("update-wire", false, "rewrite api/testdata/wire/*.json")

// placedBackend answers a dry run with a placement, an expected start and a
// place in the queue, so that every field of the answer has a value.
type placedBackend struct{ *fakeBackend }

func (b placedBackend) DryRun(ctx context.Context, spec protocol.CheckedSpec) (client.DryRunAnswer, error) {
	return client.DryRunAnswer{Region: spec.Region, Allocation: spec.AllocationName, DryRun: scheduler.DryRun{
		Placement: []scheduler.WorkerPlacement{{Worker: 0, Node: "sr006-a100plus-1", GPUs: []int{2, 3}}},
		Preempts:  []string{jobA},
		Waiting:   &scheduler.WaitingInfo{Job: "dry-run", Position: 3, Reason: "waiting for " + jobA + " to release 2 GPUs"},
		ExpectedStart: &scheduler.ExpectedStart{At: time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC),
			Because:  "if " + jobA + " ends by its time limit at 14:00",
			Earliest: time.Date(2026, 11, 30, 13, 40, 0, 0, time.UTC), Latest: time.Date(2026, 11, 30, 15, 10, 0, 0, time.UTC)},
	}}, nil
}

// wireServer is the two-workspace server with every struct the API shows
// filled in: demands, expected starts, nodes reserved, held and lost, and
// fair shares.
func wireServer(t *testing.T) *Server {
	s, fb := twoWorkspaceServer(t)
	now := time.Unix(1_700_000_500, 0).UTC()
	q := &fb.queue
	q.Waiting[0].Demand = scheduler.Demand{Family: "a100plus", GPUs: 2, VRAMGB: 80, CPU: 24, RAMGB: 192}
	q.Waiting[0].ExpectedStart = &scheduler.ExpectedStart{At: now.Add(time.Hour), Because: "if " + jobA + " ends by its time limit",
		Earliest: now.Add(40 * time.Minute), Latest: now.Add(2 * time.Hour), Projected: now.Add(50 * time.Minute), Samples: 120}
	q.Waiting[1].Demand = scheduler.Demand{Family: "a100plus", GPUs: 2}
	q.Waiting[1].ExpectedStart = &scheduler.ExpectedStart{Because: jobA + " has no time limit"}
	q.Running[1].Released = []int{0}
	q.Running[1].OnLoan = true
	q.Nodes = []scheduler.NodeInfo{
		{Name: "sr006-a100plus-1", Family: "a100plus", GPUs: 8, FreeGPUs: 1, AllocatedGPUs: 5, ReleasingGPUs: 2,
			ReservedFor: jobA2, HeldGPUs: 1, HeldFor: jobB},
		{Name: "sr006-a100plus-2", Family: "a100plus", GPUs: 8, FreeGPUs: 8, Lost: true},
	}
	q.FairShare = []scheduler.WorkspaceUsage{{Workspace: teamB, GPUHours: 1.23456, Share: 0.123456, GPUs: 1, Waiting: 1},
		{Workspace: teamA, GPUHours: 8.7654321, Share: 0.876543, GPUs: 4, Waiting: 1}}
	q.FairShareHalfLife = 6 * time.Hour
	// A running notebook whose first attempt has every field of an attempt set.
	nb := fb.jobs[nbB]
	at := func(minute int) *time.Time { t := now.Add(time.Duration(minute) * time.Minute); return &t }
	exit := 0
	nb.status.Attempts[0].Number = 2
	nb.status.Attempts = append([]protocol.AttemptRecord{{Number: 1, QueuedAt: *at(10), StartedAt: at(11), EndedAt: at(20),
		EndReason: "preempted", ExitCode: &exit, Preemptor: &scheduler.Preemptor{Job: jobB, Class: scheduler.High, Kind: scheduler.KindJob},
		Placement: []scheduler.WorkerPlacement{{Worker: 0, Node: "sr006-a100plus-2", GPUs: []int{4}}, {Worker: 1, Node: "sr006-a100plus-1", GPUs: []int{5}}},
		URL:       "http://127.0.0.1:8888/", NoticeDeadline: at(19), NoticeReason: protocol.NoticeReasonPreempted, NoticedAt: at(18), CheckpointAt: at(18),
		ExitedOnNoticeAt: at(19), Warning: "idle for 50 minutes", WarnedAt: at(15), OnLoan: true,
		Released: []protocol.WorkerRelease{{Worker: 1, At: *at(19)}, {Worker: 0, At: *at(20)}}}}, nb.status.Attempts...)
	fb.seal()
	s.backend = placedBackend{fb}
	return s
}

// TestWireJSON pins the JSON of every answer that carries what the
// scheduler, the allocator or a job reports (placements, demands, nodes,
// attempts, preemptors, expected starts, GPU totals), as an admin and as a
// user of the other workspace sees it: a change to those structs must not
// change the public API.
func TestWireJSON(t *testing.T) {
	s := wireServer(t)
	dryRun := `{"script":"train.py","base_image":"img","instance_type":"a100plus.2gpu","n_workers":1,"type":"binary","priority_class":"low"}`
	for _, tc := range []struct {
		name, method, path, token, body string
		hdr                             []string
	}{
		{"queue-admin", "GET", "/public/v2/allocations/default/queue", adminTok, "", nil},
		{"queue-bob", "GET", "/public/v2/allocations/default/queue", bobToken, "", nil},
		{"queue-filtered", "GET", "/public/v2/allocations/default/queue?class=low&limit=5", bobToken, "", nil},
		{"job-bob", "GET", "/public/v2/jobs/" + jobB, bobToken, "", nil},
		{"job-expected-start", "GET", "/public/v2/jobs/" + jobB + "?expected_start=true", bobToken, "", nil},
		{"job-mlspace", "GET", "/public/v2/jobs/" + jobB + "?view=mlspace", bobToken, "", nil},
		{"job-running", "GET", "/public/v2/jobs/" + nbB, bobToken, "", nil},
		{"preemptors", "GET", "/public/v2/jobs/" + jobB + "/preemptors", bobToken, "", nil},
		{"params", "GET", "/public/v2/jobs/" + jobB + "/params", bobToken, "", nil},
		{"nodes", "GET", "/public/v2/jobs/" + nbB + "/nodes", bobToken, "", nil},
		{"checkpoint", "POST", "/public/v2/jobs/" + nbB + "/checkpoint", bobToken, "", nil},
		{"dry-run", "POST", "/public/v2/jobs?dry_run=true", bobToken, dryRun, nil},
		{"configs", "GET", "/public/v2/configs", bobToken, "", nil},
		{"allocation", "GET", "/public/v2/allocations/default", bobToken, "", nil},
		{"allocation-nodes", "GET", "/public/v2/allocations/default/nodes", bobToken, "", nil},
		{"allocation-instance-types", "GET", "/public/v2/allocations/default/instance-types", bobToken, "", nil},
		{"available-instance-types", "GET", "/public/v2/instance_types/SR006/available", bobToken, "", nil},
		{"ui-gpus", "GET", "/ui/api/allocations/default/gpus", bobToken, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+tc.token)
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != 200 {
				t.Fatalf("%s %s: %d %s", tc.method, tc.path, rec.Code, rec.Body)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, rec.Body.Bytes(), "", "  "); err != nil {
				t.Fatalf("not JSON: %v: %s", err, rec.Body)
			}
			path := filepath.Join("testdata", "wire", tc.name+".json")
			diff, err := golden.Compare(path, pretty.Bytes(), *updateWire)
			if err != nil {
				t.Fatalf("%v (run go test ./api/ -run TestWireJSON -update-wire to write it)", err)
			}
			if diff != "" {
				t.Errorf("%s %s answers other JSON than %s:\n%s", tc.method, tc.path, path, diff)
			}
		})
	}
}
