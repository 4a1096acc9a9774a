package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// body builds a RunJobRequest with extra fields.
func body(t *testing.T, extra map[string]any) []byte {
	t.Helper()
	m := map[string]any{"script": "s", "base_image": "i", "instance_type": "a100.1gpu"}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

func fieldError(t *testing.T, err error) *FieldError {
	t.Helper()
	var fe *FieldError
	require.True(t, errors.As(err, &fe), "want a *FieldError, got %T %v", err, err)
	return fe
}

// Nested objects are as strict as the top level: repeated keys in maps and
// wrongly cased or repeated keys in health_params are 400s naming the path.
func TestStrictKeysAtEveryDepth(t *testing.T) {
	for _, tc := range []struct {
		extra, reason, field string
	}{
		{`,"env_variables":{"A":"1","A":"2"}`, JSONDuplicate, "env_variables.A"},
		{`,"flags":{"lr":"1","x":"2","lr":"3"}`, JSONDuplicate, "flags.lr"},
		{`,"health_params":{"Action":"restart","action":"delete"}`, JSONUnknownField, "health_params.Action"},
		{`,"health_params":{"log_period":30,"LOG_PERIOD":31}`, JSONUnknownField, "health_params.LOG_PERIOD"},
		{`,"health_params":{"log_period":30,"log_period":31}`, JSONDuplicate, "health_params.log_period"},
		{`,"health_params":{"log_period":30,"nap":1}`, JSONUnknownField, "health_params.nap"},
		{`,"Env_Variables":{"A":"1"}`, JSONUnknownField, "Env_Variables"},
	} {
		_, _, err := DecodeRunJobRequest(runJobWith(tc.extra))
		var je *JSONError
		require.True(t, errors.As(err, &je), "%s: got %T %v", tc.extra, err, err)
		assert.Equal(t, tc.reason, je.Reason, tc.extra)
		assert.Equal(t, tc.field, je.Field, tc.extra)
		assert.Contains(t, je.Message, tc.field, tc.extra)
	}
	// Keys of maps are case-sensitive names: A and a are two variables.
	spec, _, err := DecodeRunJobRequest(runJobWith(`,"env_variables":{"A":"1","a":"2"},"flags":{"Lr":"1","lr":"2"}`))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"A": "1", "a": "2"}, spec.EnvVariables)
	// The same rules hold for other request objects.
	var nb struct {
		EnvVariables map[string]string `json:"env_variables"`
	}
	err = DecodeStrictJSON([]byte(`{"env_variables":{"B":"1","B":"1"}}`), &nb, []string{"env_variables"}, "notebook request")
	var je *JSONError
	require.True(t, errors.As(err, &je))
	assert.Equal(t, "env_variables.B", je.Field)
}

func TestNumericBounds(t *testing.T) {
	for _, tc := range []struct {
		extra map[string]any
		field string
		msg   string
	}{
		{map[string]any{"processes_per_worker": 1000000}, "processes_per_worker", "1 to 256"},
		{map[string]any{"processes_per_worker": "257"}, "processes_per_worker", "1 to 256"},
		{map[string]any{"processes_per_worker": 97, "instance_type": "a100plus.8gpu.80vG.96C.768G"}, "processes_per_worker", "at most 96, its CPU cores"},
		{map[string]any{"processes_per_worker": 9, "instance_type": "cpu.8C.32G"}, "processes_per_worker", "at most 8"},
		{map[string]any{"processes_per_worker": 9, "instance_type": "x.8gpu.80vG.4C.64G"}, "processes_per_worker", "at most 8, its GPUs"},
		{map[string]any{"n_workers": MaxNWorkers + 1}, "n_workers", "between 1 and 1024"},
		{map[string]any{"n_workers": 0}, "n_workers", "between 1 and 1024"},
		{map[string]any{"max_retry": 101}, "max_retry", "between 0 and 100"},
		{map[string]any{"health_params": map[string]any{"log_period": MaxLogPeriodMinutes + 1}}, "health_params.log_period", "between 20 and 720"},
	} {
		_, _, err := DecodeRunJobRequest(body(t, tc.extra))
		fe := fieldError(t, err)
		assert.Equal(t, tc.field, fe.Field, "%v", tc.extra)
		assert.Contains(t, fe.Message, tc.msg, "%v", tc.extra)
	}
	// The caps themselves are fine.
	for _, extra := range []map[string]any{
		{"processes_per_worker": 96, "instance_type": "a100plus.8gpu.80vG.96C.768G"},
		{"processes_per_worker": 256},
		{"processes_per_worker": "default", "instance_type": "x.8gpu.80vG.4C.64G"},
		{"n_workers": MaxNWorkers},
	} {
		_, _, err := DecodeRunJobRequest(body(t, extra))
		assert.NoError(t, err, "%v", extra)
	}
}

// Three flags of 50,000 bytes pass the per-entry limit, but not Linux's
// limit of one argument: refused at decoding, naming flags.
func TestCommandLineFitsTheOS(t *testing.T) {
	flags := map[string]any{}
	for _, k := range []string{"a", "b", "c"} {
		flags[k] = strings.Repeat("x", 50000)
	}
	_, _, err := DecodeRunJobRequest(body(t, map[string]any{"flags": flags}))
	fe := fieldError(t, err)
	assert.Equal(t, "flags", fe.Field)
	assert.Contains(t, fe.Message, "131071")
	// Quotes count as the shell quoting makes them.
	_, _, err = DecodeRunJobRequest(body(t, map[string]any{"flags": map[string]any{"q": strings.Repeat("'", 40000)}}))
	assert.Equal(t, "flags", fieldError(t, err).Field)
	// The script and flags together, for a Python type too.
	_, _, err = DecodeRunJobRequest(body(t, map[string]any{"script": strings.Repeat("s", MaxArgBytes), "type": "pytorch",
		"flags": map[string]any{"f": strings.Repeat("f", 21800), "g": strings.Repeat("g", 21800), "h": strings.Repeat("h", 21800)}}))
	fe = fieldError(t, err)
	assert.Equal(t, "script", fe.Field)
	// Without the Python interpreter in front, the same fits.
	_, _, err = DecodeRunJobRequest(body(t, map[string]any{"script": strings.Repeat("s", MaxArgBytes), "type": "binary",
		"flags": map[string]any{"f": strings.Repeat("f", 21700), "g": strings.Repeat("g", 21700), "h": strings.Repeat("h", 21700)}}))
	require.NoError(t, err)
	// Environment: many variables of 60 KiB each fit one by one, not together.
	env := map[string]any{}
	for i := range 20 {
		env[fmt.Sprintf("V%d", i)] = strings.Repeat("v", 60000)
	}
	_, _, err = DecodeRunJobRequest(body(t, map[string]any{"env_variables": env}))
	fe = fieldError(t, err)
	assert.Equal(t, "env_variables", fe.Field)
	assert.Contains(t, fe.Message, "environment")
}

// The encoded size, not the body size, is what Temporal limits: "<" takes 6
// bytes in the JSON Temporal stores.
func TestEncodedSize(t *testing.T) {
	_, _, err := DecodeRunJobRequest(body(t, map[string]any{"job_desc": strings.Repeat("<", 400000)}))
	fe := fieldError(t, err)
	assert.True(t, fe.TooLarge)
	assert.Equal(t, "job_desc", fe.Field)
	assert.Contains(t, fe.Message, "largest field is job_desc")

	env := map[string]any{}
	for i := range 40 {
		env[fmt.Sprintf("V%02d", i)] = strings.Repeat("&", 5000)
	}
	env["BIG"] = strings.Repeat("&", 9000)
	_, _, err = DecodeRunJobRequest(body(t, map[string]any{"env_variables": env, "job_desc": strings.Repeat("d", 400000)}))
	fe = fieldError(t, err)
	assert.True(t, fe.TooLarge)
	assert.Equal(t, "env_variables", fe.Field)
	assert.Contains(t, fe.Message, "largest entry env_variables.BIG")

	// Plain text just under a megabyte is fine.
	_, _, err = DecodeRunJobRequest(body(t, map[string]any{"job_desc": strings.Repeat("d", 1000000)}))
	assert.NoError(t, err)
}

// A big worker spec times many workers outgrows what one run of the job's
// workflow may hold (attempts beyond continue as new, so max_retry does not
// count).
func TestHistoryBudget(t *testing.T) {
	env := map[string]any{}
	for i := range 8 {
		env[fmt.Sprintf("V%d", i)] = strings.Repeat("v", 60000)
	}
	ok := map[string]any{"env_variables": env, "max_retry": 100, "n_workers": 50}
	_, _, err := DecodeRunJobRequest(body(t, ok))
	require.NoError(t, err)
	ok["n_workers"] = 100
	_, _, err = DecodeRunJobRequest(body(t, ok))
	fe := fieldError(t, err)
	assert.False(t, fe.TooLarge)
	assert.Equal(t, "env_variables", fe.Field)
	assert.Contains(t, fe.Message, "starts 100 workers")
}

func TestConfineDir(t *testing.T) {
	root := "/data/workspaces/team-a"
	for _, tc := range []struct{ dir, want, err string }{
		{"", "", ""},
		{"ckpt", root + "/ckpt", ""},
		{"./a/../b/", root + "/b", ""},
		{root, root, ""},
		{root + "/x/y", root + "/x/y", ""},
		{"../team-b", "", "leads outside"},
		{"a/../../..", "", "leads outside"},
		{"/tmp/x", "", "outside your workspace"},
		{root + "-evil/x", "", "outside your workspace"},
		{root + "/../team-b", "", "outside your workspace"},
		{"a/" + strings.Repeat("n", 256), "", "path element"},
		{strings.Repeat("a/", 2100), "", "a path may have at most"},
	} {
		got, err := ConfineDir("checkpoint_dir", root, tc.dir)
		if tc.err == "" {
			require.NoError(t, err, tc.dir)
			assert.Equal(t, tc.want, got, tc.dir)
			continue
		}
		fe := fieldError(t, err)
		assert.Equal(t, "checkpoint_dir", fe.Field)
		assert.Contains(t, fe.Message, tc.err, tc.dir)
	}
}

func TestDecodeRunJobKeepsLogsDir(t *testing.T) {
	d, err := DecodeRunJob(runJobWith(`,"logs_dir":"logs/run-1"`))
	require.NoError(t, err)
	assert.Equal(t, "logs/run-1", d.LogsDir)
	_, err = DecodeRunJob(runJobWith(`,"logs_dir":"` + strings.Repeat("l", 5000) + `"`))
	assert.Equal(t, "logs_dir", fieldError(t, err).Field)
}
