package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Bootstrap is what the TestMain of a package whose tests need a Temporal
// server prepares before them: the Temporal CLI (or why the server tests
// skip), a temporary directory, and the trainq binaries built into its bin/.
// The packages' own parts (their config, a test cluster, workers) follow
// in the run function Main calls.
type Bootstrap struct {
	// Package names the package in what it prints ("e2e", "api",
	// "e2e/kube") and in its temporary directory.
	Package string
	// Root is the module root, relative to the package: ".." or "../..".
	Root string
	// Build maps the name of a binary to the Go package it is built from
	// ("trainq-worker": "./cmd/trainq-worker"), built into BinDir.
	Build map[string]string
	// TestsWithoutServer: when no server can run, run is called all the
	// same, with only Harness.Package, Root and Skip set, to run the tests
	// that need none (those that need one skip themselves); otherwise Main
	// exits 0 having printed why.
	TestsWithoutServer bool
}

// Harness is what a Bootstrap prepared.
type Harness struct {
	Package     string
	Root        string // absolute
	Dir         string // the temporary directory, removed when the tests end
	BinDir      string // Dir/bin, with the binaries built
	TemporalBin string
	// Skip says why the tests that need a server skip; empty when they run.
	Skip string
}

// Main runs the package's tests from TestMain and exits with their code.
// With a server possible it prepares the Harness and calls run, which
// starts what the package needs and calls m.Run; without one it prints why
// once and calls run with Skip set (TestsWithoutServer) or runs no test.
func (b Bootstrap) Main(m *testing.M, run func(m *testing.M, h *Harness) int) {
	os.Exit(b.main(m, run))
}

func (b Bootstrap) main(m *testing.M, run func(m *testing.M, h *Harness) int) int {
	h := &Harness{Package: b.Package}
	root, err := filepath.Abs(b.Root)
	if err != nil {
		return h.Fail("module root", err)
	}
	h.Root = root
	temporalBin, skip, err := TemporalCLI(root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", b.Package, err)
		return 1
	}
	if skip != "" {
		fmt.Println(SkipMessage(b.Package, skip))
		if !b.TestsWithoutServer {
			return 0
		}
		h.Skip = skip
		return run(m, h)
	}
	h.TemporalBin = temporalBin
	h.Dir, err = os.MkdirTemp("", "trainq-"+strings.ReplaceAll(b.Package, "/", "-")+"-")
	if err != nil {
		return h.Fail("temporary directory", err)
	}
	defer func() { _ = os.RemoveAll(h.Dir) }()
	h.BinDir = filepath.Join(h.Dir, "bin")
	names := make([]string, 0, len(b.Build))
	for name := range b.Build {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := Build(root, filepath.Join(h.BinDir, name), b.Build[name]); err != nil {
			return h.Fail("build failed", err)
		}
	}
	return run(m, h)
}

// Fail prints what failed before the tests could run, and returns the
// exit code for it.
func (h *Harness) Fail(what string, err error) int {
	fmt.Fprintf(os.Stderr, "%s: %s: %v\n", h.Package, what, err)
	return 1
}
