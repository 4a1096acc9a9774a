package scheduler

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPlacementText(t *testing.T) {
	assert.Equal(t, "[0-3,6]", GPUListText([]int{3, 1, 0, 2, 6}))
	assert.Equal(t, "[0,1]", GPUListText([]int{1, 0}))
	assert.Equal(t, "n1[0,1] n2[4-7]", PlacementText([]WorkerPlacement{
		{Worker: 1, Node: "n2", GPUs: []int{4, 5, 6, 7}}, {Worker: 0, Node: "n1", GPUs: []int{0, 1}},
	}))
	assert.Equal(t, "-", PlacementText(nil))
}
