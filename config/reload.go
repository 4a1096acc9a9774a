package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
)

// CheckReload says whether a running trainq-api may take next in place of
// old: only the allocations' queues (their nodes, classes, defaults and
// workspaces) may change. A queue's changes apply to the jobs submitted
// after the reload; a job keeps the nodes it was given when submitted. Any
// other change (nodes, policy, limits, backend, regions) is the workers'
// to apply, when trainq-worker restarts, and the error names the first one.
func CheckReload(old, next *Config) error {
	a, err := withoutQueues(old)
	if err != nil {
		return err
	}
	b, err := withoutQueues(next)
	if err != nil {
		return err
	}
	if path := firstDifference("", a, b); path != "" {
		return fmt.Errorf("%s changed: only queues may change while trainq-api runs; restart trainq-worker and trainq-api to apply the rest", path)
	}
	return nil
}

// withoutQueues is c as generic JSON, without its allocations' queues.
func withoutQueues(c *Config) (any, error) {
	cp := *c
	cp.Regions = slices.Clone(c.Regions)
	for ri := range cp.Regions {
		cp.Regions[ri].Allocations = slices.Clone(cp.Regions[ri].Allocations)
		for ai := range cp.Regions[ri].Allocations {
			cp.Regions[ri].Allocations[ai].Queues = nil
		}
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return nil, err
	}
	var v any
	return v, json.Unmarshal(b, &v)
}

// firstDifference is the path of the first value that differs between a
// and b (decoded JSON), e.g. "regions[0].allocations[1].nodes", or "".
func firstDifference(path string, a, b any) string {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			return orRoot(path)
		}
		keys := make([]string, 0, len(x)+len(y))
		for k := range x {
			keys = append(keys, k)
		}
		for k := range y {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range slices.Compact(keys) {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if d := firstDifference(p, x[k], y[k]); d != "" {
				return d
			}
		}
		return ""
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return orRoot(path)
		}
		for i := range x {
			if d := firstDifference(fmt.Sprintf("%s[%d]", path, i), x[i], y[i]); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(a, b) {
		return orRoot(path)
	}
	return ""
}

func orRoot(path string) string {
	if path == "" {
		return "the config"
	}
	return path
}
