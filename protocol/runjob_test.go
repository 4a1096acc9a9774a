package protocol

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func runJobWith(extra string) []byte {
	return []byte(`{"script":"s","base_image":"i","instance_type":"a100.1gpu"` + extra + `}`)
}

func TestHealthParams(t *testing.T) {
	for _, tc := range []struct {
		name   string
		extra  string
		want   *JobHealth
		noteOn bool // a note about health_params
	}{
		{"absent", ``, nil, false},
		{"null", `,"health_params":null`, nil, false},
		{"restart", `,"health_params":{"log_period":30,"action":"restart"}`, &JobHealth{LogPeriod: 30 * time.Minute, Action: HealthActionRestart}, false},
		{"delete, shortest", `,"health_params":{"log_period":20,"action":"delete"}`, &JobHealth{LogPeriod: 20 * time.Minute, Action: HealthActionDelete}, false},
		{"default action", `,"health_params":{"log_period":90}`, &JobHealth{LogPeriod: 90 * time.Minute, Action: HealthActionRestart}, false},
		{"longest", `,"health_params":{"log_period":720}`, &JobHealth{LogPeriod: 12 * time.Hour, Action: HealthActionRestart}, false},
		{"notify", `,"health_params":{"log_period":60,"action":"restart","sub_actions":["notify"]}`, &JobHealth{LogPeriod: time.Hour, Action: HealthActionRestart, Notify: true}, false},
		{"notify alone", `,"health_params":{"log_period":60,"sub_actions":["notify"]}`, &JobHealth{LogPeriod: time.Hour, Action: HealthActionRestart, Notify: true}, false},
		{"no log_period", `,"health_params":{"action":"delete"}`, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, notes, err := DecodeRunJobRequest(runJobWith(tc.extra))
			require.NoError(t, err)
			assert.Equal(t, tc.want, spec.Health)
			mentioned := false
			for _, n := range notes {
				assert.NotContains(t, n, "ignored", "health_params is used now")
				mentioned = mentioned || strings.Contains(n, "health_params")
			}
			assert.Equal(t, tc.noteOn, mentioned, "notes: %q", notes)
		})
	}
}

func TestHealthParamsErrors(t *testing.T) {
	for _, tc := range []struct {
		extra, field, msg string
	}{
		{`,"health_params":{"log_period":0}`, "health_params.log_period", "must be between 20 and 720 (minutes), got 0"},
		{`,"health_params":{"log_period":19,"action":"restart"}`, "health_params.log_period", "must be between 20 and 720 (minutes), got 19"},
		{`,"health_params":{"log_period":-5,"action":"restart"}`, "health_params.log_period", "got -5"},
		{`,"health_params":{"log_period":721}`, "health_params.log_period", "must be between 20 and 720"},
		// Would overflow time.Duration as minutes.
		{`,"health_params":{"log_period":9223372036854775807}`, "health_params.log_period", "must be between 20 and 720"},
		{`,"health_params":{"log_period":30,"action":"nap"}`, "health_params.action", `"nap" is not allowed; use restart or delete`},
		{`,"health_params":{"log_period":30,"action":"Restart"}`, "health_params.action", `"Restart" is not allowed; use restart or delete`},
		{`,"health_params":{"log_period":30,"sub_actions":["notify","page"]}`, "health_params.sub_actions[1]", `"page" is not allowed; use notify`},
	} {
		_, _, err := DecodeRunJobRequest(runJobWith(tc.extra))
		var fe *FieldError
		require.True(t, errors.As(err, &fe), "%s: got %v", tc.extra, err)
		assert.Equal(t, tc.field, fe.Field, tc.extra)
		assert.Contains(t, fe.Message, tc.msg, tc.extra)
	}
	// Malformed health_params are JSON errors naming the field.
	for _, extra := range []string{`,"health_params":{"log_period":30,"x":1}`, `,"health_params":{"log_period":"30"}`, `,"health_params":5`,
		`,"health_params":{"log_period":30,"sub_actions":"notify"}`} {
		_, _, err := DecodeRunJobRequest(runJobWith(extra))
		var je *JSONError
		require.True(t, errors.As(err, &je), "%s: got %v", extra, err)
	}
}

// logs_dir still gets its note, and health_params adds none.
func TestLogsDirNoteOnly(t *testing.T) {
	_, notes, err := DecodeRunJobRequest(runJobWith(`,"logs_dir":"/tmp","health_params":{"log_period":30,"action":"restart"}`))
	require.NoError(t, err)
	require.Len(t, notes, 1)
	assert.Contains(t, notes[0], "logs_dir is ignored")
}
