package workflows

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// askedGates lists the change IDs the workflow code asks workflow.GetVersion
// about: the string constants named version* in its non-test files.
func askedGates(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	gates := map[string]string{}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range spec.Names {
				if !strings.HasPrefix(name.Name, "version") || i >= len(spec.Values) {
					continue
				}
				if lit, ok := spec.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					id, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					gates[id] = file + ": " + name.Name
				}
			}
			return true
		})
	}
	return gates
}

// TestGatesWithinTheWindow keeps the version gates to what the upgrade window
// needs (see ReplayWindow): every gate the code asks has the release that
// introduced it in gateIntroduced, and none was introduced by a release that
// every release of the window already had: such a gate guards no history
// this release can meet, and must be retired with its old path.
func TestGatesWithinTheWindow(t *testing.T) {
	asked := askedGates(t)
	for id, where := range asked {
		assert.Contains(t, gateIntroduced, id, "%s asks gate %q: name the release that introduced it in gateIntroduced", where, id)
	}
	for id := range gateIntroduced {
		assert.Contains(t, asked, id, "gateIntroduced names %q, which no code asks: remove it", id)
	}
	known := append(recordedReleases(t, historiesDir), recordedReleases(t, archivedDir)...)
	window, err := releaseWindow(known)
	require.NoError(t, err)
	oldest := window[0]
	for id, introduced := range gateIntroduced {
		c, err := compareReleases(introduced, oldest)
		require.NoError(t, err)
		assert.Positive(t, c, "gate %q came with %s, which every release of the window %v has: retire it (keep its new path only) and remove it from gateIntroduced", id, introduced, window)
		c, err = compareReleases(introduced, Release)
		require.NoError(t, err)
		assert.LessOrEqual(t, c, 0, "gate %q: release %s is later than this one (%s)", id, introduced, Release)
	}
}

func TestReleaseWindow(t *testing.T) {
	known := []string{"v0.1.0", "v0.9.0", "v0.10.0", "v0.8.0", "v0.2.0", "v0.11.0"}
	window, err := releaseWindow(known)
	require.NoError(t, err)
	assert.Equal(t, []string{"v0.8.0", "v0.9.0", Release}, window, "the two before this one, ordered by number, not text; later ones ignored")

	window, err = releaseWindow(nil)
	require.NoError(t, err)
	assert.Equal(t, []string{Release}, window)

	_, err = releaseWindow([]string{"0.9"})
	assert.ErrorContains(t, err, `release "0.9": want vMAJOR.MINOR.PATCH`)
}
