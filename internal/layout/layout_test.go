// Package layout holds the test that keeps trainq's import rules, the ones docs/developing.md's Layout
// section states: dependencies run one way, from the edges (CLI, API, worker) through the
// client and the workflows to the pure policy, never back.
package layout

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/trainq/trainq/"

// rule says what one package may not import: trainq packages outside only (when only is not
// nil; a top-level name there admits its subpackages), any trainq package in never (a
// top-level name there forbids its subpackages too, a path only that package), and Temporal
// when noTemporal.
type rule struct {
	pkg        string
	only       []string
	never      []string
	noTemporal bool
	why        string
}

var rules = []rule{
	{pkg: "scheduler", only: []string{}, noTemporal: true, why: "the pure policy, shared by the allocator, the tests and simulate"},
	{pkg: "cohort", only: []string{}, noTemporal: true, why: "the pure rules by which a cohort's allocations lend and take back nodes"},
	{pkg: "simulate", only: []string{"cohort", "scheduler"}, noTemporal: true, why: "replays traces through the policy alone"},
	{pkg: "cluster", only: []string{}, noTemporal: true, why: "the backend seam"},
	{pkg: "protocol", only: []string{"cluster", "scheduler"}, why: "names and messages shared by every side"},
	{pkg: "allocation", only: []string{"cluster", "protocol", "scheduler"}, noTemporal: true, why: "the allocator's state and rules, table-tested without Temporal"},
	{pkg: "attempts", only: []string{"protocol", "scheduler"}, noTemporal: true, why: "a running attempt's rules, table-tested without Temporal"},
	{pkg: "config", only: []string{"protocol", "scheduler"}, noTemporal: true, why: "loading and validation"},
	{pkg: "activities", never: []string{"client", "api", "cmd/trainq", "workflows", "cmd/trainq-worker"}, why: "the server side does not lean on the user-facing SDK"},
	{pkg: "workflows", never: []string{"client", "api", "cmd/trainq", "cmd/trainq-worker"}, why: "workflow code"},
	{pkg: "client", only: []string{"cluster", "config", "protocol", "scheduler"}, never: backends,
		why: "the SDK reaches trainq through Temporal, not through the server's code; it reads logs through the backend seam"},
	{pkg: "jobview", only: []string{"protocol", "scheduler"}, noTemporal: true, why: "the shapes of a job the REST API and the CLI print alike"},
	{pkg: "cmd/trainq", only: []string{"client", "cluster", "config", "joblogs", "jobview", "protocol", "scheduler", "simulate"}, never: backends,
		why: "the CLI reaches trainq through client/, and reads types, logs (joblogs), job views (jobview) and simulations (simulate), never the server's code"},
	{pkg: "api", only: []string{"client", "cluster", "config", "joblogs", "jobview", "protocol", "scheduler"}, never: backends,
		why: "the REST API reaches trainq through client/, and reads types, logs (joblogs) and job views (jobview), never the server's code"},
	{pkg: "internal/fixture", only: []string{"protocol", "scheduler"}, noTemporal: true, why: "the tests' builders, importable by the tests of every package above protocol"},
}

// backends are the backends' process code, which only trainq-worker runs; a client reads
// their logs through cluster.LogSource (cluster/agentlogs, cluster/local/logfile).
var backends = []string{"cluster/local", "cluster/kube"}

type listed struct {
	ImportPath string
	Imports    []string
}

func imports(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	m := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		m[strings.TrimPrefix(p.ImportPath, module)] = p.Imports
	}
	return m
}

// TestImportRules fails, naming the import and the rule, when a package imports what its rule
// forbids.
func TestImportRules(t *testing.T) {
	all := imports(t)
	for _, r := range rules {
		imps, ok := all[r.pkg]
		if !ok {
			t.Errorf("package %s is gone: update the rule (%s)", r.pkg, r.why)
			continue
		}
		for _, imp := range imps {
			if r.noTemporal && strings.HasPrefix(imp, "go.temporal.io/") {
				t.Errorf("%s imports %s: it must not import Temporal (%s)", r.pkg, imp, r.why)
			}
			own, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			top := strings.SplitN(own, "/", 2)[0]
			if r.only != nil && !slices.Contains(r.only, own) && !slices.Contains(r.only, top) {
				t.Errorf("%s imports %s: it may import only %v of trainq (%s)", r.pkg, own, r.only, r.why)
			}
			if slices.Contains(r.never, top) || slices.Contains(r.never, own) {
				t.Errorf("%s imports %s, which it must not (%s)", r.pkg, own, r.why)
			}
		}
	}
}
