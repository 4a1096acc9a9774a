package cohort

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func want(gpus, class int, waited time.Duration) Want {
	return Want{Family: "a100", WorkerGPUs: gpus, GPUs: gpus, Class: class, Since: t0.Add(-waited)}
}

// cohortOf is a cohort of members a, b, c (limits per member, NoLimit by default) with nodes
// named by their owner: a-0, a-1 (8 GPUs each), b-0, c-0.
func cohortOf(t *testing.T, limits map[int][2]int, holders map[string]int, reclaiming ...string) *State {
	t.Helper()
	members := []Member{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	for m := range members {
		members[m].LendingLimit, members[m].BorrowingLimit = NoLimit, NoLimit
		if l, ok := limits[m]; ok {
			members[m].LendingLimit, members[m].BorrowingLimit = l[0], l[1]
		}
	}
	nodes := []Node{{"a-0", "a100", 8, 0}, {"a-1", "a100", 8, 0}, {"b-0", "a100", 8, 1}, {"c-0", "a100", 8, 2}}
	s, err := New(members, nodes)
	require.NoError(t, err)
	for i, n := range nodes {
		if h, ok := holders[n.Name]; ok {
			s.Holder[i] = h
		}
		for _, r := range reclaiming {
			if r == n.Name {
				s.Reclaiming[i] = true
			}
		}
	}
	return s
}

func TestStep(t *testing.T) {
	type use map[string]NodeUse
	for _, tc := range []struct {
		name       string
		limits     map[int][2]int
		holders    map[string]int
		reclaiming []string
		waiting    [3][]Want
		use        use
		want       []Command
		then       map[string]int // holders afterwards (the others: their owners)
	}{{
		name:    "an idle node goes to the member whose waiting job fits it",
		waiting: [3][]Want{nil, {want(8, 1, time.Hour)}, nil},
		use:     use{"b-0": {UsedGPUs: 8}, "c-0": {UsedGPUs: 8}},
		want:    []Command{Lend{"a-0", 0, 1}},
		then:    map[string]int{"a-0": 1},
	}, {
		name:    "as many nodes as the waiting work needs",
		waiting: [3][]Want{nil, {want(8, 1, time.Hour), want(4, 1, time.Minute)}, nil},
		use:     use{"b-0": {UsedGPUs: 8}, "c-0": {UsedGPUs: 8}},
		want:    []Command{Lend{"a-0", 0, 1}, Lend{"a-1", 0, 1}},
		then:    map[string]int{"a-0": 1, "a-1": 1},
	}, {
		name:    "nothing is lent while the owner has a waiting job that fits",
		waiting: [3][]Want{{want(1, 0, 0)}, {want(8, 2, time.Hour)}, nil},
		use:     use{"b-0": {UsedGPUs: 8}, "c-0": {UsedGPUs: 8}},
	}, {
		name:    "nothing is lent where the borrower's free capacity covers its wait",
		waiting: [3][]Want{nil, {want(2, 1, time.Hour)}, nil},
		use:     use{"b-0": {UsedGPUs: 4}, "c-0": {UsedGPUs: 8}},
	}, {
		name:    "a node where a worker without GPUs runs is not lent",
		waiting: [3][]Want{nil, {want(8, 1, time.Hour)}, nil},
		use:     use{"a-0": {Workers: 1}, "a-1": {UsedGPUs: 8}, "b-0": {UsedGPUs: 8}, "c-0": {UsedGPUs: 8}},
	}, {
		name:    "a node of another family is not lent",
		waiting: [3][]Want{nil, {{Family: "h100", WorkerGPUs: 8, GPUs: 8, Class: 1}}, nil},
		use:     use{"b-0": {UsedGPUs: 8}, "c-0": {UsedGPUs: 8}},
	}, {
		name:    "the higher class borrows first, then the longer wait",
		waiting: [3][]Want{nil, {want(8, 1, 5*time.Hour)}, {want(8, 2, time.Minute)}},
		use:     use{"b-0": {UsedGPUs: 8}, "c-0": {UsedGPUs: 8}, "a-1": {UsedGPUs: 1}},
		want:    []Command{Lend{"a-0", 0, 2}},
		then:    map[string]int{"a-0": 2},
	}, {
		name:    "the lender's lending limit holds",
		limits:  map[int][2]int{0: {8, NoLimit}},
		waiting: [3][]Want{nil, {want(8, 1, time.Hour), want(8, 1, time.Hour)}, nil},
		use:     use{"b-0": {UsedGPUs: 8}, "c-0": {UsedGPUs: 8}},
		want:    []Command{Lend{"a-0", 0, 1}},
		then:    map[string]int{"a-0": 1},
	}, {
		name:    "the borrower's borrowing limit holds",
		limits:  map[int][2]int{1: {NoLimit, 4}},
		waiting: [3][]Want{nil, {want(8, 1, time.Hour)}, nil},
		use:     use{"b-0": {UsedGPUs: 8}, "c-0": {UsedGPUs: 8}},
	}, {
		name:    "an owner with waiting work takes back an idle lent node at once",
		holders: map[string]int{"a-0": 1, "a-1": 1},
		waiting: [3][]Want{{want(8, 0, time.Minute)}, {want(8, 1, time.Hour)}, nil},
		use:     use{"a-0": {UsedGPUs: 8, AtRisk: 10}, "b-0": {UsedGPUs: 8}, "c-0": {UsedGPUs: 8}},
		want:    []Command{Return{"a-1", 1, 0}},
		then:    map[string]int{"a-0": 1},
	}, {
		name:    "an owner reclaims the node whose borrowed work loses least, and no more than it needs",
		holders: map[string]int{"a-0": 1, "a-1": 2},
		waiting: [3][]Want{{want(8, 0, time.Minute)}, nil, nil},
		use:     use{"a-0": {UsedGPUs: 8, AtRisk: 100}, "a-1": {UsedGPUs: 2, AtRisk: 50}, "b-0": {UsedGPUs: 8}, "c-0": {UsedGPUs: 8}},
		want:    []Command{Reclaim{"a-1", 2, 0}},
		then:    map[string]int{"a-0": 1, "a-1": 2},
	}, {
		name:    "free GPUs scattered over nodes do not hide a whole-node job's need",
		holders: map[string]int{"a-1": 1, "c-0": 0},
		waiting: [3][]Want{{want(8, 0, time.Minute)}, nil, nil},
		use:     use{"a-0": {UsedGPUs: 4}, "c-0": {UsedGPUs: 4}, "a-1": {UsedGPUs: 8}, "b-0": {UsedGPUs: 8}},
		want:    []Command{Reclaim{"a-1", 1, 0}},
		then:    map[string]int{"a-1": 1, "c-0": 0},
	}, {
		name:       "a reclaimed node returns once its borrower's jobs have left",
		holders:    map[string]int{"a-0": 1},
		reclaiming: []string{"a-0"},
		waiting:    [3][]Want{{want(8, 0, time.Minute)}, {want(8, 1, time.Hour)}, nil},
		use:        use{"a-1": {UsedGPUs: 8}, "b-0": {UsedGPUs: 8}, "c-0": {UsedGPUs: 8}},
		want:       []Command{Return{"a-0", 1, 0}},
	}, {
		name:       "a node being reclaimed is not reclaimed twice",
		holders:    map[string]int{"a-0": 1},
		reclaiming: []string{"a-0"},
		waiting:    [3][]Want{{want(8, 0, time.Minute)}, nil, nil},
		use:        use{"a-0": {UsedGPUs: 3}, "a-1": {UsedGPUs: 8}, "b-0": {UsedGPUs: 8}, "c-0": {UsedGPUs: 8}},
		then:       map[string]int{"a-0": 1},
	}, {
		name:    "an idle borrowed node goes home when its borrower has nothing that fits it",
		holders: map[string]int{"a-0": 1},
		use:     use{"b-0": {UsedGPUs: 8}, "c-0": {UsedGPUs: 8}, "a-1": {UsedGPUs: 8}},
		want:    []Command{Return{"a-0", 1, 0}},
	}, {
		name:    "a busy borrowed node stays while its owner needs nothing",
		holders: map[string]int{"a-0": 1},
		waiting: [3][]Want{nil, nil, {want(8, 2, time.Hour)}},
		use:     use{"a-0": {UsedGPUs: 1}, "a-1": {UsedGPUs: 8}, "b-0": {UsedGPUs: 8}, "c-0": {UsedGPUs: 8}},
		then:    map[string]int{"a-0": 1},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := cohortOf(t, tc.limits, tc.holders, tc.reclaiming...)
			v := View{Waiting: tc.waiting[:], Use: make([]NodeUse, len(s.Nodes))}
			for i, n := range s.Nodes {
				v.Use[i] = tc.use[n.Name]
				if v.Use[i].UsedGPUs > 0 && v.Use[i].Workers == 0 {
					v.Use[i].Workers = 1
				}
			}
			assert.Equal(t, tc.want, s.Step(v))
			for i, n := range s.Nodes {
				h, ok := tc.then[n.Name]
				if !ok {
					h = n.Owner
				}
				assert.Equal(t, h, s.Holder[i], "holder of %s", n.Name)
			}
		})
	}
}

func TestNewRefusesWhatIsNotACohort(t *testing.T) {
	two := []Member{{Name: "a"}, {Name: "b"}}
	for _, tc := range []struct {
		members []Member
		nodes   []Node
		err     string
	}{
		{two[:1], nil, "at least 2 members"},
		{two, []Node{{"n", "a100", 8, 2}}, "owner 2 is not a member"},
		{two, []Node{{"n", "a100", 8, 0}, {"n", "a100", 8, 1}}, "node n is listed twice"},
		{[]Member{{Name: "a", LendingLimit: -2}, {Name: "b"}}, nil, "member a: a limit"},
	} {
		_, err := New(tc.members, tc.nodes)
		assert.ErrorContains(t, err, tc.err)
	}
}
