package protocol

import (
	"strings"
	"time"
)

// epochTimeLayout starts every epoch drawn since epochs are ordered: a fixed
// width, so that epochs compare as strings in the order they were drawn.
const epochTimeLayout = "20060102T150405.000000000Z"

// NewEpoch names a recovered allocator state: the time it was drawn (the
// workflow's clock), then a random suffix that keeps two allocations'
// epochs, or two drawn in the same instant, apart.
func NewEpoch(at time.Time, random string) string {
	return at.UTC().Format(epochTimeLayout) + "/" + random
}

// NewerEpoch says whether epoch a was drawn after epoch b. An epoch drawn by
// NewEpoch is newer than one of the random-only form older allocators drew;
// two random-only epochs have no order, and neither is newer.
func NewerEpoch(a, b string) bool {
	ta, okA := epochTime(a)
	tb, okB := epochTime(b)
	switch {
	case okA && okB:
		return ta.After(tb) || (ta.Equal(tb) && a > b)
	default:
		return okA && !okB
	}
}

func epochTime(e string) (time.Time, bool) {
	stamp, _, ok := strings.Cut(e, "/")
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(epochTimeLayout, stamp)
	return t, err == nil
}
