package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/trainq/trainq/jobview"
)

// runCheckpoint runs `trainq checkpoint [JOB] [--attempt N]`. A training
// script calls it right after saving a checkpoint; inside a worker, JOB and
// the attempt default to $TRAINQ_JOB_NAME and $TRAINQ_ATTEMPT.
func runCheckpoint(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "checkpoint")
	attempt := fs.Int("attempt", 0, "the attempt that saved it (default: $TRAINQ_ATTEMPT, else the job's current attempt)")
	progress := fs.Float64("progress", 0, "the share of the job's work done, more than 0 and at most 1 (e.g. 0.4): the allocator expects the job to end when its rate says")
	pos, err := parseArgs(g, fs, args, 0, 1)
	if err != nil {
		return err
	}
	job := os.Getenv("TRAINQ_JOB_NAME")
	if len(pos) == 1 {
		job = pos[0]
	} else if env := os.Getenv("TRAINQ_ATTEMPT"); env != "" && *attempt == 0 {
		n, err := strconv.Atoi(env)
		if err != nil || n < 1 {
			return usageErr("checkpoint: TRAINQ_ATTEMPT is %q, not an attempt number", env)
		}
		*attempt = n
	}
	if job == "" {
		return usageErr("checkpoint: name the job (outside a trainq worker there is no $TRAINQ_JOB_NAME); usage: trainq checkpoint %s", commandArgs("checkpoint"))
	}
	if *attempt < 0 {
		return usageErr("checkpoint: --attempt must be 1 or more; got %d", *attempt)
	}
	if !(*progress >= 0 && *progress <= 1) {
		return usageErr("checkpoint: --progress must be a share of the work done, more than 0 and at most 1 (e.g. 0.4); got %v", *progress)
	}
	c, err := g.Client(ctx)
	if err != nil {
		return err
	}
	reply, err := c.Checkpoint(ctx, job, *attempt, *progress)
	if err != nil {
		return notFound(job, err)
	}
	if g.json() {
		return g.printJSON(jobview.CheckpointOf(reply))
	}
	fmt.Fprintf(g.Stdout, "Checkpoint of %s (attempt %d) recorded at %s: a preemption from now on loses only the work done since.\n",
		reply.Job, reply.Attempt, reply.At.UTC().Format(time.RFC3339))
	return nil
}
