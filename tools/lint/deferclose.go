package main

import (
	"go/ast"
	"go/token"

	"golang.org/x/tools/go/analysis"
)

// deferredClose changes errcheck so that it does not report "defer x.Close()".
// Why: in trainq a deferred Close ends the use of something read (a file
// opened with os.Open, an HTTP response body, a pod's log stream), a
// listener or connection, or a file written with unbuffered writes
// (*os.File has no buffer: a write's failure is Write's error, which is
// checked; Close's only says the descriptor is released). The one buffered
// writer closed in a defer, the dashboard's gzip stream, writes into an HTTP
// response whose failure has no one to tell. A file whose bytes matter once
// it is closed (writeJSONAtomic's temporary file) is closed explicitly and
// its error checked.
func deferredClose(a *analysis.Analyzer) *analysis.Analyzer {
	run := a.Run
	a.Run = func(pass *analysis.Pass) (any, error) {
		deferred := map[token.Pos]bool{}
		for _, f := range pass.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				d, ok := n.(*ast.DeferStmt)
				if !ok {
					return true
				}
				if sel, ok := d.Call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Close" && len(d.Call.Args) == 0 {
					deferred[d.Call.Lparen] = true
				}
				return true
			})
		}
		filtered := *pass
		filtered.Report = func(d analysis.Diagnostic) {
			if !deferred[d.Pos] {
				pass.Report(d)
			}
		}
		return run(&filtered)
	}
	return a
}
