package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/trainq/trainq/scheduler"
	"github.com/trainq/trainq/simulate"
)

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// stamp formats a time for humans: the clock time today, the date otherwise.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	t = t.Local()
	now := time.Now()
	if y, m, d := now.Date(); t.Year() == y && t.Month() == m && t.Day() == d {
		return t.Format("15:04:05")
	}
	return t.Format("2006-01-02 15:04:05")
}

func stampPtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}

// human formats a duration roughly: 42s, 3m05s, 2h03m as the simulator
// does (simulate.Dur), and from two days on in days and hours, 3d04h.
func human(d time.Duration) string {
	d = max(d, 0).Round(time.Second)
	if d < 48*time.Hour {
		return simulate.Dur(d)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func ago(t time.Time) string { return human(time.Since(t)) + " ago" }

func preemptor(p *scheduler.Preemptor) string {
	if p == nil {
		return ""
	}
	if p.Kind == scheduler.KindNotebook {
		return p.Job + " (Jupyter server, " + p.Class.String() + ")"
	}
	return p.Job + " (" + p.Class.String() + ")"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
