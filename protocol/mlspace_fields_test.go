package protocol

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainq/trainq/scheduler"
)

// TestRunJobRequestHasEveryMLSpaceField: ML Space's RunJobRequest has 33
// fields (../shared/reference/mlspace-api.md); every one is accepted.
func TestRunJobRequestHasEveryMLSpaceField(t *testing.T) {
	assert.Len(t, RunJobRequestFieldNames, 33)
	req := `{"script":"train.py","base_image":"img","instance_type":"a100.1gpu","region":"SR006","allocation_name":"a",
		"n_workers":2,"type":"pytorch_elastic","processes_per_worker":"default","job_desc":"d","priority_class":"shared-medium",
		"max_retry":3,"env_variables":{"A":"1"},"flags":{"lr":"0.1"},"checkpoint_dir":"/c","logs_dir":"/l",
		"health_params":{"log_period":30,"action":"restart","sub_actions":["notify"]},
		"queue_name":"default","internet":true,"conda_env":"torch","shm_size_class":"large","pytorch_use_env":false,
		"elastic_min_workers":1,"elastic_max_workers":"default","elastic_max_restarts":7,
		"include_nodes":["n2","n1"],"exclude_nodes":["n3"],"tmp_storage":"fast","stop_timer":90,
		"cuda11":true,"forbid_internet":false,"forbid_s3":false,"in_communal_cluster":false,"preflight_check":true}`
	spec, _, err := DecodeRunJobRequest([]byte(req))
	require.NoError(t, err)
	_, err = spec.Normalize()
	require.NoError(t, err)
	assert.Equal(t, "medium", spec.PriorityClass, "shared-medium runs as medium")
	assert.Equal(t, "shared-medium", spec.RequestedClass)
	assert.Equal(t, "default", spec.QueueName)
	require.NotNil(t, spec.Internet)
	assert.True(t, *spec.Internet)
	assert.Equal(t, "torch", spec.CondaEnv)
	assert.Equal(t, "large", spec.ShmSizeClass)
	assert.Equal(t, []int{1, 2, 7}, []int{spec.ElasticMinWorkers, spec.ElasticMaxWorkers, spec.ElasticMaxRestarts})
	assert.Equal(t, []string{"n1", "n2"}, spec.IncludeNodes)
	assert.Equal(t, []string{"n3"}, spec.ExcludeNodes)
	assert.Equal(t, 90*time.Minute, spec.TimeLimit)
	assert.Equal(t, map[string]bool{"cuda11": true, "forbid_internet": false, "forbid_s3": false, "in_communal_cluster": false, "preflight_check": true}, spec.Deprecated)
	require.NotNil(t, spec.Health)
	assert.True(t, spec.Health.Notify)
	for _, w := range []string{"cuda11 is deprecated", "forbid_internet is deprecated", "forbid_s3 is deprecated",
		"in_communal_cluster is deprecated", "preflight_check is deprecated", "tmp_storage fast is ignored",
		"priority_class shared-medium runs as medium"} {
		assert.True(t, containsPrefixOf(spec.Warnings, w), "a warning %q in %q", w, spec.Warnings)
	}
	assert.False(t, containsPrefixOf(spec.Warnings, "the gang starts with all"), "an elastic gang starts with as many workers as fit: no warning says otherwise (%q)", spec.Warnings)
}

func containsPrefixOf(list []string, prefix string) bool {
	for _, s := range list {
		if len(s) >= len(prefix) && s[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}

// TestMLSpaceFieldErrors: each new field's bad values are refused, naming
// the field and the allowed values.
func TestMLSpaceFieldErrors(t *testing.T) {
	for _, tc := range []struct {
		extra, field, msg string
	}{
		{`,"shm_size_class":"huge"`, "shm_size_class", "use small (16 GB per GPU), medium (32 GB) or large (64 GB)"},
		{`,"pytorch_use_env":true`, "pytorch_use_env", `only for type pytorch2`},
		{`,"type":"pytorch","elastic_min_workers":1`, "elastic_min_workers", "only for type pytorch_elastic"},
		{`,"elastic_max_restarts":3`, "elastic_max_restarts", "only for type pytorch_elastic"},
		{`,"type":"pytorch_elastic","n_workers":2,"elastic_max_workers":3`, "elastic_max_workers", "more than n_workers (2)"},
		{`,"type":"pytorch_elastic","n_workers":4,"elastic_min_workers":3,"elastic_max_workers":2`, "elastic_min_workers", "more than elastic_max_workers (2)"},
		{`,"type":"pytorch_elastic","elastic_max_restarts":-1`, "elastic_max_restarts", "between 0 and 1000"},
		{`,"stop_timer":-1`, "stop_timer", "between 0 (never) and 525600 minutes"},
		{`,"include_nodes":["n1"],"exclude_nodes":["n1"]`, "exclude_nodes", "n1 is also in include_nodes"},
		{`,"include_nodes":["bad name"]`, "include_nodes[0]", "is not a name"},
		{`,"queue_name":""`, "", ""}, // empty is the default queue: accepted
		{`,"queue_name":"a b"`, "queue_name", "is not a name"},
		{`,"conda_env":"a\nb"`, "conda_env", "on one line"},
		{`,"priority_class":"shared-high"`, "priority_class", "shared-low, shared-medium"},
		// client_lib's defaults come with every job, whatever its type: accepted.
		{`,"type":"binary","elastic_min_workers":"default","elastic_max_workers":"default","elastic_max_restarts":5`, "", ""},
		{`,"elastic_min_workers":"default","elastic_max_workers":"default","elastic_max_restarts":5`, "", ""},
		{`,"type":"pytorch2","pytorch_use_env":false,"elastic_max_workers":"default"`, "", ""},
		{`,"type":"binary","elastic_min_workers":"default","elastic_max_workers":2`, "elastic_max_workers", "only for type pytorch_elastic"},
	} {
		spec, _, err := DecodeRunJobRequest(runJobWith(tc.extra))
		if err == nil {
			_, err = spec.Normalize()
		}
		if tc.field == "" {
			assert.NoError(t, err, tc.extra)
			continue
		}
		var fe *FieldError
		require.True(t, errors.As(err, &fe), "%s: got %v", tc.extra, err)
		assert.Equal(t, tc.field, fe.Field, tc.extra)
		assert.Contains(t, fe.Message, tc.msg, tc.extra)
	}
	// Wrong JSON types name the field too.
	for _, extra := range []string{`,"internet":"yes"`, `,"include_nodes":"n1"`, `,"stop_timer":"90"`, `,"elastic_min_workers":1.5`} {
		_, _, err := DecodeRunJobRequest(runJobWith(extra))
		require.Error(t, err, extra)
	}
}

// TestPlainRequestHasNoWarnings: a request with trainq's own fields only
// gets no warning.
func TestPlainRequestHasNoWarnings(t *testing.T) {
	spec, _, err := DecodeRunJobRequest(runJobWith(`,"priority_class":"high","n_workers":2,"max_retry":3`))
	require.NoError(t, err)
	_, err = spec.Normalize()
	require.NoError(t, err)
	assert.Empty(t, spec.Warnings)
	assert.Empty(t, spec.RequestedClass)
}

// TestTopologyFields: required_topology and preferred_topology (trainq's own)
// decode into the spec's typed topology; both at once, or a blank level, are
// refused naming the field; a request without them keeps the allocation's.
func TestTopologyFields(t *testing.T) {
	const base = `{"script":"s","base_image":"img","instance_type":"a100.1gpu","region":"SR006","n_workers":2`
	for _, tc := range []struct {
		extra, field string
		want         scheduler.GangTopology
	}{
		{`,"required_topology":"rack"}`, "", scheduler.GangTopology{Level: "rack", Required: true}},
		{`,"preferred_topology":"block"}`, "", scheduler.GangTopology{Level: "block"}},
		{`}`, "", scheduler.GangTopology{}},
		{`,"required_topology":"rack","preferred_topology":"rack"}`, "preferred_topology", scheduler.GangTopology{}},
		{`,"required_topology":"a b"}`, "required_topology", scheduler.GangTopology{}},
		{`,"required_topology":"rack","no_move":true}`, "", scheduler.GangTopology{Level: "rack", Required: true}},
	} {
		spec, _, err := DecodeRunJobRequest([]byte(base + tc.extra))
		if tc.field != "" {
			var fe *FieldError
			require.True(t, errors.As(err, &fe), "%s: %v", tc.extra, err)
			assert.Equal(t, tc.field, fe.Field)
			continue
		}
		require.NoError(t, err, tc.extra)
		assert.Equal(t, tc.want, spec.Topology, tc.extra)
		p := spec.Params()
		assert.Equal(t, tc.want.Level, p.RequiredTopology+p.PreferredTopology, "params echo the field")
		assert.Equal(t, strings.Contains(tc.extra, "no_move"), spec.NoMove && p.NoMove, "no_move is kept and echoed")
	}
}
