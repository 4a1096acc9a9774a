// Package predeclared reports declarations that shadow a predeclared
// identifier (len, cap, new, clear, min, max, error, string, ...): inside
// their scope the builtin is out of reach, and a reader who sees len(x)
// or new(T) there is misled.
package predeclared

import (
	"go/ast"
	"go/types"

	"golang.org/x/tools/go/analysis"
)

var Analyzer = &analysis.Analyzer{
	Name: "predeclared",
	Doc:  "report declarations that shadow a predeclared identifier",
	Run:  run,
}

func run(pass *analysis.Pass) (any, error) {
	packageNames := map[*ast.Ident]bool{}
	for _, f := range pass.Files {
		packageNames[f.Name] = true
	}
	for ident, obj := range pass.TypesInfo.Defs {
		if packageNames[ident] || types.Universe.Lookup(ident.Name) == nil {
			continue
		}
		// Struct fields and methods are reached through a selector (x.len),
		// and labels live in their own name space: none hides the builtin.
		switch obj := obj.(type) {
		case *types.Var:
			if obj.Kind() == types.FieldVar {
				continue
			}
		case *types.Func:
			if obj.Signature().Recv() != nil {
				continue
			}
		case *types.Label:
			continue
		}
		// obj is nil for the x of "switch x := v.(type)", which shadows too.
		pass.Reportf(ident.Pos(), "%s shadows the predeclared identifier %s", ident.Name, ident.Name)
	}
	return nil, nil
}
