package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/trainq/trainq/protocol"
)

// runAllocator runs `trainq allocator recover [ALLOCATION]`, or drain and
// undrain (runDrain).
func runAllocator(ctx context.Context, g *globals, args []string) error {
	if len(args) > 0 && (args[0] == "drain" || args[0] == "undrain") {
		return runDrain(ctx, g, args[0] == "undrain", args[1:])
	}
	fs := newFlagSet(g, "allocator")
	region := fs.String("region", "", "region (default: the config's default region)")
	pos, err := parseArgs(g, fs, args, 1, 2)
	if err != nil {
		return err
	}
	if pos[0] != "recover" {
		return usageErr("%q is not an allocator command; use `trainq allocator recover [ALLOCATION]`, `trainq allocator drain NODE` or `trainq allocator undrain NODE`", pos[0])
	}
	pos = pos[1:]
	cfg, err := g.Config()
	if err != nil {
		return err
	}
	name := ""
	if len(pos) == 1 {
		name = pos[0]
	}
	r, a, err := cfg.Allocation(*region, name)
	if err != nil {
		return usageErr("%v", err)
	}
	c, err := g.Client(ctx)
	if err != nil {
		return err
	}
	if !g.json() {
		g.note("recovering %s/%s: asking every job what it holds and every node agent which workers run there...", r.Name, a.Name)
	}
	reply, err := c.RecoverAllocator(ctx, r.Name, a.Name)
	if err != nil {
		return err
	}
	if g.json() {
		return g.printJSON(recoverOutput(reply))
	}
	w := g.Stdout
	fmt.Fprintf(w, "Allocation %s/%s recovered (epoch %s): %s listed; %d holding capacity, %d waiting.\n",
		r.Name, a.Name, reply.Epoch, plural(reply.Listed, "running job", "running jobs"), reply.Running, reply.Waiting)
	fmt.Fprintf(w, "Every node grants nothing until its agent has stopped the workers nobody holds; `trainq queue %s` shows the fenced ones.\n", a.Name)
	if len(reply.Conflicts) > 0 {
		fmt.Fprintf(w, "\n%s could not be taken back because another job holds that capacity:\n  %s\n",
			plural(len(reply.Conflicts), "hold", "holds"), strings.Join(reply.Conflicts, "\n  "))
	}
	return nil
}

// runDrain takes a node out of service (its jobs get a notice, reason
// node_drain, and rerun elsewhere without spending max_retry), or puts it
// back.
func runDrain(ctx context.Context, g *globals, undrain bool, args []string) error {
	verb := "drain"
	if undrain {
		verb = "undrain"
	}
	fs := newFlagSet(g, "allocator "+verb)
	region := fs.String("region", "", "region (default: the config's default region)")
	allocation := fs.String("allocation", "", "the node's allocation (default: the region's default allocation)")
	reason := fs.String("reason", "", "why, shown to the jobs told to leave and in trainq queue")
	pos, err := parseArgs(g, fs, args, 1, 1)
	if err != nil {
		return err
	}
	if undrain && *reason != "" {
		return usageErr("allocator undrain: --reason is for a drain")
	}
	cfg, err := g.Config()
	if err != nil {
		return err
	}
	r, a, err := cfg.Allocation(*region, *allocation)
	if err != nil {
		return usageErr("%v", err)
	}
	c, err := g.Client(ctx)
	if err != nil {
		return err
	}
	reply, err := c.DrainNode(ctx, r.Name, a.Name, protocol.DrainRequest{Node: pos[0], Undrain: undrain, Reason: *reason})
	if err != nil {
		return err
	}
	if g.json() {
		return g.printJSON(drainOutput(reply))
	}
	w := g.Stdout
	switch {
	case undrain && !reply.Changed:
		fmt.Fprintf(w, "Node %s of %s/%s was not drained; nothing changed.\n", pos[0], r.Name, a.Name)
	case undrain:
		fmt.Fprintf(w, "Node %s of %s/%s is back in service (unless a fence holds it: see trainq queue %s).\n", pos[0], r.Name, a.Name, a.Name)
	case !reply.Changed:
		fmt.Fprintf(w, "Node %s of %s/%s was drained already; its jobs were told then.\n", pos[0], r.Name, a.Name)
	case len(reply.Jobs) == 0:
		fmt.Fprintf(w, "Node %s of %s/%s drained: nothing new starts there, and no job runs there.\n", pos[0], r.Name, a.Name)
	default:
		notice := "they are stopped now"
		if d := a.PreemptionNotice.D(); d > 0 {
			notice = fmt.Sprintf("they have their notice (%s unless their class has its own) to save and exit", d)
		}
		fmt.Fprintf(w, "Node %s of %s/%s drained: nothing new starts there; %s told to leave (%s), and rerun elsewhere:\n  %s\n",
			pos[0], r.Name, a.Name, plural(len(reply.Jobs), "job", "jobs"), notice, strings.Join(reply.Jobs, "\n  "))
	}
	return nil
}
