package protocol

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Cron is a parsed 5-field cron expression (minute hour day-of-month month
// day-of-week), as ML Space's shutdown_at takes it. Fields accept *, a
// number, a range a-b, a list a,b,c and a step */n or a-b/n; day-of-week
// is 0-7 (0 and 7 are Sunday). As in Vixie cron, when both day-of-month
// and day-of-week are restricted, a day matching either matches. Times are
// evaluated in UTC. Next is pure, so workflow code may use it.
type Cron struct {
	minute, hour, dom, month, dow uint64 // bit i set: value i matches
	domAny, dowAny                bool
}

// cronFields are the fields of a cron expression, in order, with their
// allowed values.
var cronFields = []struct {
	name     string
	min, max int
}{
	{"minute", 0, 59}, {"hour", 0, 23}, {"day of month", 1, 31}, {"month", 1, 12}, {"day of week", 0, 7},
}

// ParseCron parses a 5-field cron expression. The error names the field
// and the values it allows.
func ParseCron(expr string) (Cron, error) {
	fields := strings.Fields(expr)
	if len(fields) != 5 {
		return Cron{}, fmt.Errorf("%q is not a cron expression: want 5 fields (minute hour day-of-month month day-of-week, e.g. \"0 20 * * 1-5\"), got %d", expr, len(fields))
	}
	var bits [5]uint64
	for i, f := range fields {
		b, err := parseCronField(f, cronFields[i].min, cronFields[i].max)
		if err != nil {
			return Cron{}, fmt.Errorf("%q: %s field %q: %v (allowed: *, %d-%d, ranges a-b, lists a,b and steps */n)",
				expr, cronFields[i].name, f, err, cronFields[i].min, cronFields[i].max)
		}
		bits[i] = b
	}
	c := Cron{minute: bits[0], hour: bits[1], dom: bits[2], month: bits[3], dow: bits[4],
		domAny: fields[2] == "*", dowAny: fields[4] == "*"}
	if c.dow&(1<<7) != 0 {
		c.dow |= 1 // 7 is Sunday too
	}
	if c.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return Cron{}, fmt.Errorf("%q never matches a date", expr)
	}
	return c, nil
}

func parseCronField(f string, lo, hi int) (uint64, error) {
	var bits uint64
	for _, part := range strings.Split(f, ",") {
		rng, stepText, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("step %q is not a positive number", stepText)
			}
			step = n
		}
		from, to := lo, hi
		switch {
		case rng == "*":
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			var err error
			if from, err = cronNumber(a, lo, hi); err != nil {
				return 0, err
			}
			if to, err = cronNumber(b, lo, hi); err != nil {
				return 0, err
			}
			if from > to {
				return 0, fmt.Errorf("range %s runs backwards", rng)
			}
		default:
			n, err := cronNumber(rng, lo, hi)
			if err != nil {
				return 0, err
			}
			from, to = n, n
			if hasStep {
				to = hi // "5/15" is 5-hi/15, as in Vixie cron
			}
		}
		for v := from; v <= to; v += step {
			bits |= 1 << uint(v)
		}
	}
	return bits, nil
}

func cronNumber(s string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d is out of range", n)
	}
	return n, nil
}

func (c Cron) dayMatches(t time.Time) bool {
	dom := c.dom&(1<<uint(t.Day())) != 0
	dow := c.dow&(1<<uint(t.Weekday())) != 0
	switch {
	case c.domAny && c.dowAny:
		return true
	case c.domAny:
		return dow
	case c.dowAny:
		return dom
	}
	return dom || dow
}

// cronHorizon bounds Next's search: every expression that matches at all
// matches within 8 years (29 February on a given weekday is the rarest).
const cronHorizon = 8 * 366 * 24 * time.Hour

// Next is the first minute strictly after t that matches, in UTC, or the
// zero time if none does within cronHorizon.
func (c Cron) Next(t time.Time) time.Time {
	t = t.UTC().Truncate(time.Minute).Add(time.Minute)
	end := t.Add(cronHorizon)
	for t.Before(end) {
		switch {
		case c.month&(1<<uint(t.Month())) == 0:
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		case !c.dayMatches(t):
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
		case c.hour&(1<<uint(t.Hour())) == 0:
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour()+1, 0, 0, 0, time.UTC)
		case c.minute&(1<<uint(t.Minute())) == 0:
			t = t.Add(time.Minute)
		default:
			return t
		}
	}
	return time.Time{}
}
