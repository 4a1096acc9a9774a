package main

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/trainq/trainq/protocol"
)

// parseInterspersed parses flags that may come before, between or after
// positional arguments, and returns the positional arguments. "--" ends the
// flags: everything after it is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// kvFlag is a repeatable KEY=VALUE flag (--env, --flag).
type kvFlag struct {
	name string
	m    map[string]string
}

func (f *kvFlag) String() string {
	if f == nil || len(f.m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(f.m)) {
		parts = append(parts, k+"="+f.m[k])
	}
	return strings.Join(parts, ",")
}

func (f *kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", s)
	}
	if f.m == nil {
		f.m = map[string]string{}
	}
	f.m[k] = v
	return nil
}

// procsFlag is processes_per_worker: a positive number, or "default" (0:
// one process per GPU of the worker).
type procsFlag struct{ n int }

func (f *procsFlag) String() string {
	if f == nil || f.n == 0 {
		return "default"
	}
	return strconv.Itoa(f.n)
}

func (f *procsFlag) Set(s string) error {
	n, err := protocol.ParseProcessesPerWorker(s)
	if err != nil {
		return err
	}
	f.n = n
	return nil
}

// multiFlag is a repeatable string flag; commas also separate values.
type multiFlag []string

func (f *multiFlag) String() string { return strings.Join(*f, ",") }

func (f *multiFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*f = append(*f, v)
		}
	}
	return nil
}

// setFlags returns the names of the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}
