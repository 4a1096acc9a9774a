package nolint_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/trainq/trainq/tools/lint/nolint"
	"github.com/trainq/trainq/tools/lint/predeclared"
)

func TestNolint(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), nolint.Wrap(predeclared.Analyzer), "q")
}
