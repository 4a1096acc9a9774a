package golden

import "testing"

func TestDiff(t *testing.T) {
	if d := Diff("a\nb", "a\nb"); d != "" {
		t.Errorf("same text: %q", d)
	}
	if d, want := Diff("a\nb", "a\nc\nd"), "line 2:\n  want b\n  got  c\nline 3:\n  want \n  got  d\n"; d != want {
		t.Errorf("Diff = %q, want %q", d, want)
	}
}
