package main

import (
	"context"
	"fmt"
	"strings"
)

// runAllocator runs `trainq allocator recover [ALLOCATION]`.
func runAllocator(ctx context.Context, g *globals, args []string) error {
	fs := newFlagSet(g, "allocator")
	region := fs.String("region", "", "region (default: the config's default region)")
	pos, err := parseArgs(g, fs, args, 1, 2)
	if err != nil {
		return err
	}
	if pos[0] != "recover" {
		return usageErr("%q is not an allocator command; use `trainq allocator recover [ALLOCATION]`", pos[0])
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
		return g.printJSON(reply)
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
