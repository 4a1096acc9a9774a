// Package unparam runs mvdan.cc/unparam's checker (unused parameters, results
// that are always the same) as an analysis pass, one package at a time; it
// leaves out exported functions, whose callers may be elsewhere.
package unparam

import (
	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/buildssa"
	"golang.org/x/tools/go/packages"
	"mvdan.cc/unparam/check"
)

var Analyzer = &analysis.Analyzer{
	Name:     "unparam",
	Doc:      "report unused function parameters and results",
	Requires: []*analysis.Analyzer{buildssa.Analyzer},
	Run:      run,
}

func run(pass *analysis.Pass) (any, error) {
	ssa := pass.ResultOf[buildssa.Analyzer].(*buildssa.SSA)
	var c check.Checker
	c.Packages([]*packages.Package{{
		Fset:      pass.Fset,
		Syntax:    pass.Files,
		Types:     pass.Pkg,
		TypesInfo: pass.TypesInfo,
	}})
	c.ProgramSSA(ssa.Pkg.Prog)
	issues, err := c.Check()
	if err != nil {
		return nil, err
	}
	for _, issue := range issues {
		pass.Reportf(issue.Pos(), "%s", issue.Message())
	}
	return nil, nil
}
