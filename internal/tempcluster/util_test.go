package tempcluster

import "testing"

// TestFreeLowPortNeverRepeats: ports are picked at random and bound only
// when their service starts, so without a record of those given out a
// cluster's twelve ports could hold the same one twice (about once in 200
// clusters), and its second service then failed to bind.
func TestFreeLowPortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 1000 {
		port, err := freeLowPort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d returned twice", port)
		}
		seen[port] = true
	}
}
