package protocol

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCronNext(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse("2006-01-02 15:04", s)
		require.NoError(t, err)
		return v
	}
	// 2026-03-04 is a Wednesday.
	for _, tc := range []struct{ expr, from, want string }{
		{"* * * * *", "2026-03-04 10:15", "2026-03-04 10:16"},
		{"0 20 * * *", "2026-03-04 10:15", "2026-03-04 20:00"},
		{"0 20 * * *", "2026-03-04 20:00", "2026-03-05 20:00"}, // strictly after
		{"*/15 * * * *", "2026-03-04 10:15", "2026-03-04 10:30"},
		{"5/20 * * * *", "2026-03-04 10:26", "2026-03-04 10:45"},
		{"30 9 * * 1-5", "2026-03-06 10:00", "2026-03-09 09:30"}, // Friday after 9:30 -> Monday
		{"0 0 * * 7", "2026-03-04 10:00", "2026-03-08 00:00"},    // 7 is Sunday
		{"0 0 1 * *", "2026-03-04 10:00", "2026-04-01 00:00"},
		{"0 0 29 2 *", "2026-03-04 10:00", "2028-02-29 00:00"},
		{"0 12 13 * 5", "2026-03-04 10:00", "2026-03-06 12:00"}, // the 13th or a Friday
		{"0,30 8-9 * 12 *", "2026-03-04 10:00", "2026-12-01 08:00"},
	} {
		c, err := ParseCron(tc.expr)
		require.NoError(t, err, tc.expr)
		assert.Equal(t, at(tc.want), c.Next(at(tc.from)), "%s after %s", tc.expr, tc.from)
	}
}

func TestParseCronRejects(t *testing.T) {
	for expr, want := range map[string]string{
		"":             "want 5 fields",
		"0 20 * *":     "want 5 fields",
		"0 20 * * * *": "want 5 fields",
		"60 * * * *":   `minute field "60": 60 is out of range (allowed: *, 0-59`,
		"* 24 * * *":   `hour field "24"`,
		"* * 0 * *":    `day of month field "0"`,
		"* * * 13 *":   `month field "13"`,
		"* * * * 8":    `day of week field "8"`,
		"*/0 * * * *":  `step "0" is not a positive number`,
		"5-1 * * * *":  "range 5-1 runs backwards",
		"x * * * *":    `"x" is not a number`,
		"0 0 30 2 *":   "never matches a date",
		"@daily":       "want 5 fields",
	} {
		_, err := ParseCron(expr)
		require.Error(t, err, expr)
		assert.Contains(t, err.Error(), want, expr)
	}
}
