package metrics

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
)

var (
	// Label matchers, range selectors and string literals hold no metric names.
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers  = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promMetricRef = regexp.MustCompile(`\b(?:trainq|temporal)_[a-zA-Z0-9_]+`)
)

// DashboardMetrics returns, sorted, every trainq_ and temporal_ metric name
// the PromQL queries of a Grafana dashboard file use: panel targets, nested
// panels of rows, and template variable queries.
func DashboardMetrics(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	set := map[string]bool{}
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				walk(c, k)
			}
		case []any:
			for _, c := range v {
				walk(c, key)
			}
		case string:
			if key == "expr" || key == "query" || key == "definition" {
				for _, name := range PromQLMetrics(v) {
					set[name] = true
				}
			}
		}
	}
	walk(doc, "")
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// PromQLMetrics returns the trainq_ and temporal_ metric names a PromQL
// expression selects.
func PromQLMetrics(expr string) []string {
	expr = promStrings.ReplaceAllString(expr, "")
	expr = promMatchers.ReplaceAllString(expr, "")
	expr = promGrouping.ReplaceAllString(expr, "")
	return promMetricRef.FindAllString(expr, -1)
}
