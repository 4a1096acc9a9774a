package allocation

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/trainq/trainq/internal/fixture"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// A filtered queue page lists the matching jobs only, counts them, and
// projects expected starts for the listed page only.
func TestViewFiltersTheQueue(t *testing.T) {
	s := newState(t, 1)
	inWorkspace := func(r protocol.CapacityRequest, ws string) protocol.CapacityRequest { r.Workspace = ws; return r }
	given(t, s,
		granted(fixture.Request{Job: "run", Attempt: 1, Class: scheduler.High, GPUs: 8}.Capacity()), // the node is full: the others wait
		queued(inWorkspace(fixture.Request{Job: "nb-a", Kind: scheduler.KindNotebook, Class: scheduler.High, GPUs: 1}.Capacity(), "a")),
		queued(inWorkspace(fixture.Request{Job: "hi-b", Attempt: 1, Class: scheduler.High, GPUs: 8}.Capacity(), "b")),
		queued(inWorkspace(fixture.Request{Job: "med-a", Attempt: 1, Class: scheduler.Medium, GPUs: 4}.Capacity(), "a")),
		queued(inWorkspace(fixture.Request{Job: "med-b", Attempt: 1, Class: scheduler.Medium, GPUs: 4}.Capacity(), "b")),
		queued(inWorkspace(fixture.Request{Job: "low-b", Attempt: 1, Class: scheduler.Low, GPUs: 1}.Capacity(), "b")),
	)
	whole := s.View(protocol.QueuePage{Limit: 10}, false, t0)
	positions := map[string]int{}
	for _, w := range whole.Waiting {
		positions[w.Job] = w.Position
	}
	assert.Zero(t, whole.WaitingMatched, "no filter, no count")
	medium := scheduler.Medium
	for _, tc := range []struct {
		name    string
		page    protocol.QueuePage
		listed  []string
		matched int
	}{
		{"workspace", protocol.QueuePage{Limit: 10, Workspace: "b"}, []string{"hi-b", "med-b", "low-b"}, 3},
		{"workspace, second page", protocol.QueuePage{Limit: 2, Offset: 2, Workspace: "b"}, []string{"low-b"}, 3},
		{"class", protocol.QueuePage{Limit: 10, Class: &medium}, []string{"med-a", "med-b"}, 2},
		{"kind", protocol.QueuePage{Limit: 10, Kind: scheduler.KindNotebook}, []string{"nb-a"}, 1},
		{"class and workspace", protocol.QueuePage{Limit: 10, Class: &medium, Workspace: "a"}, []string{"med-a"}, 1},
		{"none match", protocol.QueuePage{Limit: 10, Workspace: "c"}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.page.ExpectedStarts = true
			v := s.View(tc.page, false, t0.Add(time.Minute))
			var listed []string
			for _, w := range v.Waiting {
				listed = append(listed, w.Job)
				assert.Equal(t, positions[w.Job], w.Position, "%s: its place in the whole queue", w.Job)
				assert.NotNil(t, w.ExpectedStart, "%s: the listed page has expected starts", w.Job)
			}
			assert.Equal(t, tc.listed, listed)
			assert.Equal(t, tc.matched, v.WaitingMatched)
			assert.Equal(t, 5, v.WaitingTotal, "the total counts the whole queue")
			assert.Len(t, v.Running, 1)
		})
	}
}
