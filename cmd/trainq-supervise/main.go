// Command trainq-supervise is the parent of one job worker's processes on the
// local backend (see local.Supervise): `trainq-supervise <worker dir>`.
//
// It is trainq-worker's `supervise` subcommand in a binary of its own: it
// links only the local backend, so it starts in a few milliseconds and a
// few MB, where trainq-worker (Temporal SDK, Kubernetes client) takes about
// four times the CPU to start and ten times the memory to stay, once per
// running worker. trainq-worker uses it when it lies next to its own
// executable, and runs itself as the supervisor otherwise.
package main

import (
	"fmt"
	"os"

	"github.com/trainq/trainq/cluster/local"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: trainq-supervise <worker dir> (started by trainq-worker's local backend, not by hand)")
		os.Exit(2)
	}
	os.Exit(local.Supervise(os.Args[1]))
}
