package workflows

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Release is the release this workflow code is. `make histories` records its
// histories under testdata/histories/<Release>, and the upgrade window is
// counted from it.
const Release = "v0.10.0"

// ReplayWindow is the upgrade window: a release replays and serves the
// workflows started by the ReplayWindow releases before it, so an upgrade may
// skip at most ReplayWindow-1 releases. Two things keep older runs from
// meeting a release:
//   - A job runs its whole life on the build it started on (Worker
//     Deployment versioning), so its history only ever meets its own code.
//     Workers without a build ID run every job on the newest code: let the
//     jobs that a release before the window started end first.
//   - An allocator run hands over to a fresh run within a reclaim interval
//     of a build it has not run on taking its workflow tasks
//     (versionHandOverOnNewBuild), so once an upgrade is done every live
//     allocator run was started by the current build. Runs started before
//     v0.10.0 had no such bound: upgrading to v0.10.0, an allocator run that
//     older code started fails its task and is terminated to recover
//     (docs/upgrading.md).
//
// A version gate that every release in the window already had guards no
// history a release can meet: it is retired, with its old path. The recorded
// histories of releases before the window move to testdata/archived-histories
// and are no longer replayed. TestGatesWithinTheWindow names what to retire
// when a new release moves the window.
const ReplayWindow = 2

// gateIntroduced says which release introduced each version gate
// (workflow.GetVersion change ID) the workflow code still asks.
var gateIntroduced = map[string]string{
	versionAutoshutdown:            "v0.9.0",
	versionLearnedEstimate:         "v0.10.0",
	versionGuardedActivities:       "v0.10.0",
	versionHandOverOnNewBuild:      "v0.10.0",
	versionNoticeResets:            "v0.10.0",
	versionRefuseOverCap:           "v0.10.0",
	versionTellAdoptedToLeave:      "v0.10.0",
	versionChargeAdopted:           "v0.10.0",
	versionReleaseStaleGrant:       "v0.10.0",
	versionReclaimForgotten:        "v0.10.0",
	versionBoundedArrivals:         "v0.10.0",
	versionGatesBeforeHandlers:     "v0.10.0",
	versionFenceEndsWithItsEpoch:   "v0.10.0",
	versionStrangersOfTheirEpoch:   "v0.10.0",
	versionRecoveryNotesItsRun:     "v0.10.0",
	versionChargeStrangers:         "v0.10.0",
	versionRegisterAgainAfterReset: "v0.10.0",
	versionWithdrawByUpdate:        "v0.10.0",
	versionCoalesceReleases:        "v0.10.0",
	versionAskWhyAgain:             "v0.10.0",
}

// releaseWindow is the window of Release among known releases: the
// ReplayWindow releases before it, oldest first, and Release.
func releaseWindow(known []string) ([]string, error) {
	var before []string
	for _, r := range known {
		c, err := compareReleases(r, Release)
		if err != nil {
			return nil, err
		}
		if c < 0 && !slices.Contains(before, r) {
			before = append(before, r)
		}
	}
	slices.SortFunc(before, func(a, b string) int { c, _ := compareReleases(a, b); return c })
	if len(before) > ReplayWindow {
		before = before[len(before)-ReplayWindow:]
	}
	return append(before, Release), nil
}

// compareReleases orders two vMAJOR.MINOR.PATCH release names.
func compareReleases(a, b string) (int, error) {
	pa, err := releaseParts(a)
	if err != nil {
		return 0, err
	}
	pb, err := releaseParts(b)
	if err != nil {
		return 0, err
	}
	return slices.Compare(pa, pb), nil
}

func releaseParts(r string) ([]int, error) {
	fields := strings.Split(strings.TrimPrefix(r, "v"), ".")
	if !strings.HasPrefix(r, "v") || len(fields) != 3 {
		return nil, fmt.Errorf("release %q: want vMAJOR.MINOR.PATCH", r)
	}
	parts := make([]int, 3)
	for i, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("release %q: want vMAJOR.MINOR.PATCH", r)
		}
		parts[i] = n
	}
	return parts, nil
}
