package main

import (
	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// What each command prints with --output json, made from what the client
// answers. TestCLIJSON pins the JSON of each through these functions.

// queueOutput is trainq queue's and trainq top's answer.
func queueOutput(v protocol.QueueView) any { return v }

// statusOutput is trainq status's answer: the status, and with --eta the
// expected start of a pending job.
func statusOutput(st protocol.JobStatus, expected *scheduler.ExpectedStart) any {
	return statusWithStart{JobStatus: st, ExpectedStart: expected}
}

// dryRunOutput is trainq submit --test-only's answer.
func dryRunOutput(d client.DryRunAnswer) any { return d }

// checkpointOutput is trainq checkpoint's answer.
func checkpointOutput(r protocol.CheckpointReply) any { return r }

// recoverOutput is trainq allocator recover's answer.
func recoverOutput(r protocol.RecoverReply) any { return r }

// drainOutput is trainq allocator drain's and undrain's answer.
func drainOutput(r protocol.DrainReply) any { return r }

// noticeOutput is trainq notice's answer.
func noticeOutput(n protocol.WorkerNotice) any { return n }

// listOutput is trainq list's answer: never null.
func listOutput(jobs []client.JobSummary) any {
	if jobs == nil {
		return []client.JobSummary{}
	}
	return jobs
}
