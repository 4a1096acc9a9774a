// Package golden compares what a test renders with its golden file, for the
// tests that pin a public JSON (api's TestWireJSON, cmd/trainq's TestCLIJSON).
package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Diff lists the lines of want and got that differ, by line number ("" when
// they are the same).
func Diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want %s\n  got  %s\n", i+1, wl, gl)
		}
	}
	return b.String()
}

// Compare writes got to the golden file at path first when update is set,
// then reads the file and lists how got differs from it ("" when it does not).
func Compare(path string, got []byte, update bool) (string, error) {
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			return "", err
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if string(want) == string(got) {
		return "", nil
	}
	return Diff(string(want), string(got)), nil
}
