package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/api/serviceerror"
)

func TestRetryAsksAgainOnlyAfterTransientErrors(t *testing.T) {
	calls := 0
	err := Retry(t, time.Minute, "query", func(context.Context) error {
		calls++
		switch calls {
		case 1:
			return serviceerror.NewUnavailable("server busy")
		case 2:
			return errors.New("rpc error: code = Internal desc = stream terminated by RST_STREAM with error code: CANCEL")
		case 3:
			return serviceerror.NewDeadlineExceeded("query timed out")
		}
		return nil
	})
	assert.NoError(t, err)
	assert.Equal(t, 4, calls)

	calls = 0
	notFound := serviceerror.NewNotFound("no such workflow")
	err = Retry(t, time.Minute, "query", func(context.Context) error { calls++; return notFound })
	assert.Equal(t, notFound, err, "a lasting error is returned at once")
	assert.Equal(t, 1, calls)

	err = Retry(t, 500*time.Millisecond, "query", func(context.Context) error { return serviceerror.NewUnavailable("down") })
	assert.Error(t, err, "the last transient error once the deadline has passed")
}
