package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func getAsBob(s *Server, path string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", path, nil)
	req.Header.Set("Authorization", "Bearer "+bobToken)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

// The queue endpoint lists a page of the waiting jobs (offset, limit) with
// the total; a page out of bounds is refused naming the field.
func TestQueuePages(t *testing.T) {
	s, _ := twoWorkspaceServer(t)
	path := "/public/v2/allocations/" + fakeAlloc + "/queue"
	for _, tc := range []struct {
		query         string
		offset, limit int
		launchOrders  []int
		waitingTotal  int
		runningListed int
	}{
		{"", 0, 100, []int{1, 2}, 2, 3},
		{"?limit=1", 0, 1, []int{1}, 2, 3},
		{"?offset=1&limit=1", 1, 1, []int{2}, 2, 3},
		{"?offset=5", 5, 100, nil, 2, 3},
	} {
		rec := getAsBob(s, path+tc.query)
		require.Equal(t, 200, rec.Code, "%s: %s", tc.query, rec.Body)
		var q queueView
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &q))
		var orders []int
		for _, w := range q.Waiting {
			orders = append(orders, w.LaunchOrder)
		}
		assert.Equal(t, tc.launchOrders, orders, tc.query)
		assert.Equal(t, tc.waitingTotal, q.WaitingTotal, tc.query)
		assert.Equal(t, tc.offset, q.Offset, tc.query)
		assert.Equal(t, tc.limit, q.Limit, tc.query)
		assert.Len(t, q.Running, tc.runningListed, tc.query)
	}
	for _, tc := range []struct{ query, field, phrase string }{
		{"?limit=0", "limit", "from 1 to 1000"},
		{"?limit=1001", "limit", "from 1 to 1000"},
		{"?limit=ten", "limit", `"ten" is not allowed`},
		{"?offset=-1", "offset", "from 0 to"},
	} {
		rec := getAsBob(s, path+tc.query)
		require.Equal(t, 422, rec.Code, "%s: %s", tc.query, rec.Body)
		e := errorOf(t, rec)
		assert.Equal(t, tc.field, e.Field, tc.query)
		assert.Contains(t, e.Message, tc.phrase, tc.query)
	}
	rec := getAsBob(s, path+"?page=2")
	require.Equal(t, 400, rec.Code)
	assert.Contains(t, errorOf(t, rec).Message, "allowed: region, offset, limit, expected_start, class, type, workspace")
}

// The queue's filters (class, type, workspace) list a page of the jobs they
// keep and count them; bad values are 422s naming the param and the values
// allowed, and a user may filter by its own workspace only.
func TestQueueFilters(t *testing.T) {
	s, _ := twoWorkspaceServer(t)
	path := "/public/v2/allocations/" + fakeAlloc + "/queue"
	get := func(token, query string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", path+query, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec
	}
	// The fake's queue: alice's high jobA2 (1), bob's low jobB (2).
	for _, tc := range []struct {
		token, query string
		listed       []string // job names as the asker sees them
		launchOrders []int
		matched      *int
	}{
		{bobToken, "", []string{hiddenName, jobB}, []int{1, 2}, nil},
		{bobToken, "?class=low", []string{jobB}, []int{2}, ptr(1)},
		{bobToken, "?class=high", []string{hiddenName}, []int{1}, ptr(1)},
		{bobToken, "?class=medium", nil, nil, ptr(0)},
		{bobToken, "?type=job", []string{hiddenName, jobB}, []int{1, 2}, ptr(2)},
		{bobToken, "?type=notebook", nil, nil, ptr(0)},
		{bobToken, "?workspace=" + teamB, []string{jobB}, []int{2}, ptr(1)},
		{bobToken, "?workspace=" + teamB + "&class=high", nil, nil, ptr(0)},
		{bobToken, "?type=job&offset=1&limit=1", []string{jobB}, []int{2}, ptr(2)},
		{adminTok, "?workspace=" + teamA, []string{jobA2}, []int{1}, ptr(1)},
		{adminTok, "?workspace=nobody", nil, nil, ptr(0)},
	} {
		rec := get(tc.token, tc.query)
		require.Equal(t, 200, rec.Code, "%s: %s", tc.query, rec.Body)
		var q queueView
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &q))
		var names []string
		var orders []int
		for _, w := range q.Waiting {
			names, orders = append(names, w.JobName), append(orders, w.LaunchOrder)
		}
		assert.Equal(t, tc.listed, names, tc.query)
		assert.Equal(t, tc.launchOrders, orders, "%s: launch orders are places in the whole queue", tc.query)
		assert.Equal(t, tc.matched, q.WaitingMatched, tc.query)
		assert.Equal(t, 2, q.WaitingTotal, tc.query)
		if tc.matched == nil {
			assert.NotContains(t, rec.Body.String(), "waiting_matched", "no filter, no count")
		}
		if tc.token == bobToken {
			for _, name := range foreignToBob {
				assert.NotContains(t, rec.Body.String(), name, "%s: redaction holds under a filter", tc.query)
			}
		}
	}
	for _, tc := range []struct{ query, field, phrase string }{
		{"?class=urgent", "class", `"urgent" is not allowed; give it once, one of low, medium, high`},
		{"?class=High", "class", "one of low, medium, high"},
		{"?class=", "class", "one of low, medium, high"},
		{"?class=low&class=high", "class", "give it once"},
		{"?type=cron", "type", "one of job, notebook"},
		{"?workspace=", "workspace", "a workspace's name"},
	} {
		rec := get(bobToken, tc.query)
		require.Equal(t, 422, rec.Code, "%s: %s", tc.query, rec.Body)
		e := errorOf(t, rec)
		assert.Equal(t, tc.field, e.Field, tc.query)
		assert.Contains(t, e.Message, tc.phrase, tc.query)
	}
	// Which of alice's jobs wait is what bob may not see: not even by filtering.
	rec := get(bobToken, "?workspace="+teamA)
	require.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
	e := errorOf(t, rec)
	assert.Equal(t, "workspace", e.Field)
	assert.Contains(t, e.Message, "its own workspace only")
	assert.NotContains(t, rec.Body.String(), jobA2)
}

// TestQueueFiltersOnAnOlderAllocator: an allocator built before the filters
// ignores them and lists every waiting job; the API says so (503) instead of
// answering a page its filters do not hold, and the plain page still works.
func TestQueueFiltersOnAnOlderAllocator(t *testing.T) {
	s, f := twoWorkspaceServer(t)
	f.ignoresFilters = true
	path := "/public/v2/allocations/" + fakeAlloc + "/queue"
	rec := getAsBob(s, path+"?class=low")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	assert.Contains(t, errorOf(t, rec).Message, "does not filter its queue yet")
	assert.NotContains(t, rec.Body.String(), jobA2)
	require.Equal(t, http.StatusOK, getAsBob(s, path).Code)
}

func ptr[T any](v T) *T { return &v }

// TestJobExpectedStart: GET /jobs/{name}?expected_start=true adds when a
// pending job is expected to start, and the assumption, with other
// workspaces' names hidden; a bad value is refused naming the parameter.
func TestJobExpectedStart(t *testing.T) {
	s, _ := twoWorkspaceServer(t)
	get := recorderDo(s, bobToken)
	a := get("GET", "/public/v2/jobs/"+jobB+"?expected_start=true", "")
	require.Equal(t, http.StatusOK, a.Code, string(a.Body))
	var v struct {
		ExpectedStartAt *time.Time `json:"expected_start_at"`
		ExpectedStart   string     `json:"expected_start"`
	}
	require.NoError(t, json.Unmarshal(a.Body, &v))
	require.NotNil(t, v.ExpectedStartAt)
	assert.Equal(t, time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC), v.ExpectedStartAt.UTC())
	assert.Equal(t, "if "+hiddenName+" ends by its time limit at 13:00", v.ExpectedStart)

	a = get("GET", "/public/v2/jobs/"+jobB, "")
	require.Equal(t, http.StatusOK, a.Code)
	assert.NotContains(t, string(a.Body), "expected_start", "not asked, not projected")

	a = get("GET", "/public/v2/jobs/"+jobB+"?expected_start=soon", "")
	assert.Equal(t, http.StatusBadRequest, a.Code)
	assert.Contains(t, string(a.Body), `"expected_start"`)
}

func TestInstanceTypes(t *testing.T) {
	s, _, _ := fuzzServer(t)
	for _, a := range s.config().Allocations() {
		for _, it := range instanceTypes(a.Allocation.Nodes) {
			assert.Positive(t, it.MaxWorkers, it.Name)
		}
	}
}
