// Command trainq-lint runs the linters that go vet and staticcheck leave out
// (make lint): errcheck (unchecked errors), unparam (unused parameters and
// results) and predeclared (declarations that shadow a builtin such as len,
// new, min or clear). A finding that is right as it is gets a
// "//nolint:NAME // reason" comment on its line or the line above; calls
// whose errors are dropped everywhere are listed, with why, in
// errcheck.exclude, which make lint passes as -errcheck.exclude.
//
// Versions are pinned in this directory's go.mod (its own module, so that
// trainq's go.mod does not carry the linters' dependencies).
package main

import (
	"golang.org/x/tools/go/analysis/multichecker"

	"github.com/trainq/trainq/tools/lint/nolint"
	"github.com/trainq/trainq/tools/lint/predeclared"
	"github.com/trainq/trainq/tools/lint/unparam"

	"github.com/kisielk/errcheck/errcheck"
)

func main() {
	multichecker.Main(
		nolint.Wrap(deferredClose(errcheck.Analyzer)),
		nolint.Wrap(unparam.Analyzer),
		nolint.Wrap(predeclared.Analyzer),
	)
}
