package docscheck

import (
	"slices"
	"testing"
)

// TestParsing pins the shell parsing the doc check rests on: a quoted ; or #
// stays in its word, a list splits into simple commands, and assignments and
// loop keywords before a command are dropped.
func TestParsing(t *testing.T) {
	line := stripComment(`X=1 bin/trainq submit --script 'echo hi; sleep 1 # not a comment' --n-workers 2   # a comment`)
	parts := splitList(line)
	if len(parts) != 1 {
		t.Fatalf("a quoted ; split the command: %q", parts)
	}
	got := dropAssignments(shellWords(parts[0]))
	want := []string{"bin/trainq", "submit", "--script", "echo hi; sleep 1 # not a comment", "--n-workers", "2"}
	if !slices.Equal(got, want) {
		t.Errorf("words %q, want %q", got, want)
	}
	if got := splitList("for a in x y; do make lint && make test | tee log; done"); len(got) != 5 {
		t.Errorf("list split into %q, want 5 simple commands", got)
	}
	if got := dropAssignments(shellWords(" do temporal operator")); got[0] != "temporal" {
		t.Errorf("loop keyword kept: %q", got)
	}
	if !hasTest([]string{"TestChaos", "TestChaosCampaign"}, "TestChaos", true) || hasTest([]string{"TestChaosCampaign"}, "TestChaos", true) {
		t.Error("an anchored -run name must match a test exactly")
	}
}
