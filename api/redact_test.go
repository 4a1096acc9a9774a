package api

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedactorText(t *testing.T) {
	s, _ := twoWorkspaceServer(t)
	rd := s.redactor(Principal{User: "bob", Workspace: teamB, Role: RoleUser})
	require.NoError(t, rd.learn(t.Context(), []string{jobA, cliA, jobB, "lm-mpi-job-nobody"}))
	assert.True(t, rd.shows(jobB))
	assert.False(t, rd.shows(jobA))
	assert.False(t, rd.shows("lm-mpi-job-nobody"), "a name nobody has stays hidden")
	for in, want := range map[string]string{
		"preempted by " + jobA + ".":           "preempted by " + hiddenName + ".",
		"(" + jobA + "),[" + cliA + "]":        "(" + hiddenName + "),[" + hiddenName + "]",
		jobA + "/attempt-1/worker-0":           hiddenName + "/attempt-1/worker-0",
		"waiting for " + jobB + " and " + jobA: "waiting for " + jobB + " and " + hiddenName,
		jobA + "x is another word":             jobA + "x is another word",
		"x" + cliA:                             "x" + cliA,
		cliA + "...":                           hiddenName + "...",
		"no names here":                        "no names here",
		"lm-mpi-job-nobody ran":                hiddenName + " ran",
	} {
		assert.Equal(t, want, rd.text(in), in)
	}
	// An admin sees every name; an unknown name is never touched.
	admin := s.redactor(Principal{User: "root", Workspace: "ops", Role: RoleAdmin})
	assert.Equal(t, "by "+jobA, admin.text("by "+jobA))
	assert.Equal(t, []string{jobA, nbB}, namesIn("by "+jobA+", then "+nbB+"; not lm-mpi-job-"+string(rune(0))))

	// apply reaches strings in structs, slices, maps and pointers.
	type inner struct{ Note string }
	v := struct {
		A   string
		B   []string
		C   map[string]string
		D   *inner
		E   any
		low string
	}{A: "by " + jobA, B: []string{jobA}, C: map[string]string{jobA: "x " + jobA}, D: &inner{Note: jobA}, E: inner{Note: jobA}, low: jobA}
	require.NoError(t, rd.apply(t.Context(), &v))
	assert.Equal(t, "by "+hiddenName, v.A)
	assert.Equal(t, []string{hiddenName}, v.B)
	assert.Equal(t, map[string]string{hiddenName: "x " + hiddenName}, v.C)
	assert.Equal(t, hiddenName, v.D.Note)
	assert.Equal(t, inner{Note: hiddenName}, v.E)
}
