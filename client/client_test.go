package client

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/trainq/trainq/cluster/local"
	"github.com/trainq/trainq/protocol"
)

// The local backend reads its own logs through the same seam.
var _ LogSource = (*local.Backend)(nil)

func TestVisibilityQueryQuotesValues(t *testing.T) {
	q := VisibilityQuery(ListFilter{States: []string{"Pending", "Running"}, Author: "o'brien\\", Names: []string{"a", "b"}})
	assert.Equal(t, "WorkflowType = '"+protocol.JobWorkflowName+"' AND WorkflowId IN ('a', 'b') AND "+
		protocol.SAState+" IN ('Pending', 'Running') AND "+protocol.SAAuthor+" = 'obrien'", q)
}

// TestVisibilityQueryHasRun: a timeline's listing leaves out the jobs still
// waiting for their first attempt, and keeps a waiting rerun (it ran before).
func TestVisibilityQueryHasRun(t *testing.T) {
	q := VisibilityQuery(ListFilter{Allocation: "a", HasRun: true})
	assert.Equal(t, "WorkflowType = '"+protocol.JobWorkflowName+"' AND "+protocol.SAAllocation+" = 'a' AND ("+
		protocol.SAState+" != 'Pending' OR "+protocol.SAAttempt+" > 1)", q)
}
