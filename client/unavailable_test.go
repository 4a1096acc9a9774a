package client

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/api/serviceerror"
)

func TestUnavailableCountsSearchAttributesNotLoadedYet(t *testing.T) {
	// What the cluster's restarted frontend answered during a PostgreSQL outage.
	err := fmt.Errorf("could not start job chaos-002: %w", serviceerror.NewInvalidArgument("search attribute TrainqAttempt is not defined"))
	assert.True(t, Unavailable(err))
	// What a frontend answers within its namespace cache's refresh of the registration.
	assert.True(t, Unavailable(serviceerror.NewInvalidArgument("Namespace default has no mapping defined for search attribute TrainqRegion")))
	// Not trainq's attribute, or another invalid argument: the caller's fault.
	assert.False(t, Unavailable(serviceerror.NewInvalidArgument("search attribute CustomerTag is not defined")))
	assert.False(t, Unavailable(serviceerror.NewInvalidArgument("WorkflowId is not set on request.")))
}
