package protocol

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/scheduler"
)

// A queue page's filters are checked by name, with the values allowed.
func TestQueuePageValidateFilters(t *testing.T) {
	high, bogus := scheduler.High, scheduler.Class(7)
	for _, ok := range []QueuePage{{}, {Class: &high}, {Kind: scheduler.KindNotebook}, {Kind: scheduler.KindJob, Workspace: "ws-a"}} {
		assert.NoError(t, ok.Validate(), "%+v", ok)
	}
	for _, tc := range []struct {
		page  QueuePage
		field string
		says  string
	}{
		{QueuePage{Class: &bogus}, "class", "low, medium, high"},
		{QueuePage{Kind: "cron"}, "kind", "job, notebook"},
		{QueuePage{Kind: "Notebook"}, "kind", "job, notebook"},
	} {
		fe := fieldError(t, tc.page.Validate())
		assert.Equal(t, tc.field, fe.Field)
		assert.Contains(t, fe.Message, tc.says)
	}
}

// The filters travel in the queue query's JSON argument, and an older
// argument (no filters) decodes to an unfiltered page.
func TestQueuePageFiltersRoundTrip(t *testing.T) {
	low := scheduler.Low
	page := QueuePage{Limit: 5, Class: &low, Kind: scheduler.KindJob, Workspace: "ws-a"}
	b, err := json.Marshal(page)
	require.NoError(t, err)
	assert.JSONEq(t, `{"limit":5,"class":"low","kind":"job","workspace":"ws-a","now":"0001-01-01T00:00:00Z"}`, string(b))
	var back QueuePage
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, page, back)
	assert.True(t, back.Filtered())

	var old QueuePage
	require.NoError(t, json.Unmarshal([]byte(`{"limit":5}`), &old))
	assert.False(t, old.Filtered())
	assert.True(t, old.Keeps(&scheduler.Request{Class: scheduler.High, Kind: scheduler.KindNotebook, Workspace: "x"}))
}

func TestQueuePageKeeps(t *testing.T) {
	medium := scheduler.Medium
	r := &scheduler.Request{Class: scheduler.Medium, Kind: scheduler.KindJob, Workspace: "ws-a"}
	for _, tc := range []struct {
		page QueuePage
		want bool
	}{
		{QueuePage{Class: &medium}, true},
		{QueuePage{Kind: scheduler.KindNotebook}, false},
		{QueuePage{Workspace: "ws-b"}, false},
		{QueuePage{Class: &medium, Kind: scheduler.KindJob, Workspace: "ws-a"}, true},
		{QueuePage{Class: &medium, Workspace: "ws-b"}, false}, // every filter set must keep it
	} {
		assert.Equal(t, tc.want, tc.page.Keeps(r), "%+v", tc.page)
	}
}
