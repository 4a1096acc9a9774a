// Package nolint drops an analyzer's findings on lines marked
// "//nolint:NAME // reason" (on the line itself or the line above; NAME may
// be a comma-separated list). The reason is required: a marker without one
// is itself reported, so every exception says why next to the code.
package nolint

import (
	"go/ast"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// Wrap changes a in place so that its findings on marked lines are dropped,
// and returns it.
func Wrap(a *analysis.Analyzer) *analysis.Analyzer {
	run := a.Run
	a.Run = func(pass *analysis.Pass) (any, error) {
		marked := markedLines(pass, a.Name)
		report := pass.Report
		filtered := *pass
		filtered.Report = func(d analysis.Diagnostic) {
			p := pass.Fset.Position(d.Pos)
			if marked[lineKey{p.Filename, p.Line}] {
				return
			}
			report(d)
		}
		return run(&filtered)
	}
	return a
}

type lineKey struct {
	file string
	line int
}

// markedLines returns the lines where a's findings are dropped, and reports
// the markers for a that give no reason.
func markedLines(pass *analysis.Pass, name string) map[lineKey]bool {
	marked := map[lineKey]bool{}
	for _, f := range pass.Files {
		for _, group := range f.Comments {
			for _, c := range group.List {
				if !names(c, name) {
					continue
				}
				if !hasReason(c.Text) {
					pass.Reportf(c.Pos(), "//nolint:%s needs a reason: //nolint:%s // why", name, name)
				}
				p := pass.Fset.Position(c.Pos())
				marked[lineKey{p.Filename, p.Line}] = true
				if !trailing(pass, c) {
					marked[lineKey{p.Filename, p.Line + 1}] = true
				}
			}
		}
	}
	return marked
}

// names tells whether c is a //nolint marker naming the analyzer.
func names(c *ast.Comment, name string) bool {
	rest, ok := strings.CutPrefix(c.Text, "//nolint:")
	if !ok {
		return false
	}
	list, _, _ := strings.Cut(rest, " ")
	for _, n := range strings.Split(list, ",") {
		if n == name {
			return true
		}
	}
	return false
}

func hasReason(text string) bool {
	_, reason, ok := strings.Cut(text, "//nolint:")
	if !ok {
		return false
	}
	_, reason, ok = strings.Cut(reason, "//")
	return ok && strings.TrimSpace(reason) != ""
}

// trailing tells whether c follows code on its line (then it marks that line
// only), rather than standing on a line of its own (then it marks the line
// below too).
func trailing(pass *analysis.Pass, c *ast.Comment) bool {
	file := pass.Fset.File(c.Pos())
	content, err := pass.ReadFile(file.Name())
	if err != nil {
		return false
	}
	start := file.Offset(file.LineStart(file.Line(c.Pos())))
	return strings.TrimSpace(string(content[start:file.Offset(c.Pos())])) != ""
}
