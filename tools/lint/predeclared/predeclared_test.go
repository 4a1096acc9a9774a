package predeclared_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/trainq/trainq/tools/lint/predeclared"
)

func TestPredeclared(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), predeclared.Analyzer, "p")
}
