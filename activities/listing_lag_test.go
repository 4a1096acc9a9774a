package activities

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestListingLagFromEnv(t *testing.T) {
	t.Setenv(EnvTestListingLag, "")
	d, err := ListingLagFromEnv()
	require.NoError(t, err)
	assert.Zero(t, d, "off when unset")

	t.Setenv(EnvTestListingLag, "2500ms")
	d, err = ListingLagFromEnv()
	require.NoError(t, err)
	assert.Equal(t, 2500*time.Millisecond, d)

	for _, bad := range []string{"5", "soon", "-1s"} {
		t.Setenv(EnvTestListingLag, bad)
		_, err = ListingLagFromEnv()
		assert.Error(t, err, bad)
	}
}

func TestHiddenByLag(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	assert.True(t, hiddenByLag(now.Add(-time.Second), now, 2*time.Second), "started within the lag")
	assert.False(t, hiddenByLag(now.Add(-2*time.Second), now, 2*time.Second), "started the lag ago")
	assert.False(t, hiddenByLag(now.Add(-time.Minute), now, 2*time.Second))
}
