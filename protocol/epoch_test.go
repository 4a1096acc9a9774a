package protocol

import (
	"testing"
	"time"
)

func TestNewerEpoch(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	early, late := NewEpoch(t0, "b"), NewEpoch(t0.Add(time.Millisecond), "a")
	same := NewEpoch(t0, "c")
	legacy := "9e57094f-3c57-4bd5-9713-2a74fdaa2f75"
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{late, early, true},
		{early, late, false},
		{early, early, false},
		{same, early, true}, // same instant: the suffix orders them, one way only
		{early, same, false},
		{early, legacy, true},
		{legacy, early, false},
		{legacy, "another-random-one", false},
		{"another-random-one", legacy, false},
		{"", early, false},
	} {
		if got := NewerEpoch(c.a, c.b); got != c.want {
			t.Errorf("NewerEpoch(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	if NewEpoch(t0.Add(10*time.Second), "x") < NewEpoch(t0.Add(9*time.Second), "y") {
		t.Error("epochs drawn later must compare greater as strings")
	}
}
