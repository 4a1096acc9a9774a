package workflows

import "sync/atomic"

// workerBuild names the build of the worker process this code runs in: its
// Worker Deployment build ID, or a checksum of its executable when it runs
// unversioned (see SetWorkerBuild). The allocator reads it through
// workflow.MutableSideEffect (see checkBuild), which records each new value in
// the history, so a replay sees the build each workflow task was run on.
var workerBuild atomic.Value

// SetWorkerBuild names this process's build, before its workers start.
func SetWorkerBuild(build string) { workerBuild.Store(build) }

// thisWorkerBuild is the build SetWorkerBuild named ("" if none did: tests).
func thisWorkerBuild() string {
	b, _ := workerBuild.Load().(string)
	return b
}
