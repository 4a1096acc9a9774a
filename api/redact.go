package api

import (
	"context"
	"reflect"
	"strings"
	"sync"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/protocol"
)

// hiddenName replaces the name of a job of another workspace.
const hiddenName = "(a job of another workspace)"

// The redaction rule, applied to every answer that can mention a job other
// than the one asked about (status, preemptors, queue, log headers, list):
//
//	A user sees the name of a job only if the job is in the user's
//	workspace. Every other job name, wherever it appears (a field of its
//	own, a list, or inside a sentence such as an attempt's end reason), is
//	replaced by "(a job of another workspace)". Admins see every name.
//
// The names a redactor knows are those the handler gives it (the job fields
// of the answer) and every word in the answer's text that has the shape of
// a job name trainq makes (lm-mpi-job-…, jupyter-…). Each is looked up once
// per request, in the user's workspace; a name that cannot be found (a job
// that vanished, or one visibility does not show yet and Temporal cannot
// describe) stays hidden.
type redactor struct {
	s       *Server
	p       Principal
	mu      sync.Mutex
	visible map[string]bool // known names: true = the user may see it
}

func (s *Server) redactor(p Principal) *redactor {
	return &redactor{s: s, p: p, visible: map[string]bool{}}
}

// describeMax bounds the names one request describes one by one when
// visibility does not list them.
const describeMax = 16

// learn looks up the names the redactor does not know yet.
func (rd *redactor) learn(ctx context.Context, names []string) error {
	if rd.p.Admin() {
		return nil
	}
	rd.mu.Lock()
	var ask []string
	seen := map[string]bool{}
	for _, n := range names {
		if _, known := rd.visible[n]; !known && n != "" && !seen[n] && cluster.ValidJobName(n) == nil {
			seen[n] = true
			ask = append(ask, n)
		}
	}
	rd.mu.Unlock()
	if len(ask) == 0 {
		return nil
	}
	found := map[string]bool{}
	for rest := ask; len(rest) > 0; {
		batch := rest[:min(len(rest), 200)]
		rest = rest[len(batch):]
		jobs, err := rd.s.backend.List(ctx, client.ListFilter{Names: batch, Workspace: rd.p.Workspace, Limit: len(batch)})
		if err != nil {
			return err
		}
		for _, j := range jobs {
			found[j.JobName] = true
		}
	}
	// Visibility lags: a job started a moment ago may not be listed yet.
	// Temporal itself knows it: describe (a few, at once) the rest.
	var unlisted []string
	for _, n := range ask {
		if !found[n] && len(unlisted) < describeMax {
			unlisted = append(unlisted, n)
		}
	}
	mine := make([]bool, len(unlisted))
	var wg sync.WaitGroup
	for i, n := range unlisted {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := rd.s.backend.Describe(ctx, n)
			mine[i] = err == nil && info.Workspace == rd.p.Workspace
		}()
	}
	wg.Wait()
	for i, n := range unlisted {
		found[n] = found[n] || mine[i]
	}
	rd.mu.Lock()
	for _, n := range ask {
		rd.visible[n] = found[n]
	}
	rd.mu.Unlock()
	return nil
}

// know records names the user may see (the job asked about, jobs listed
// within the workspace), so they need no lookup.
func (rd *redactor) know(names ...string) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	for _, n := range names {
		rd.visible[n] = true
	}
}

// hide records names as hidden unless they are known to be visible.
func (rd *redactor) hide(names ...string) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	for _, n := range names {
		if !rd.visible[n] {
			rd.visible[n] = false
		}
	}
}

// shows says whether the user may see the name. Unknown names are hidden.
func (rd *redactor) shows(name string) bool {
	if rd.p.Admin() {
		return true
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return rd.visible[name]
}

// hidden says whether name is a known job name the user may not see.
func (rd *redactor) hidden(name string) bool {
	if rd.p.Admin() {
		return false
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	v, known := rd.visible[name]
	return known && !v
}

// name is the name, or hiddenName.
func (rd *redactor) name(n string) string {
	if rd.shows(n) {
		return n
	}
	return hiddenName
}

func (rd *redactor) names(ns []string) []string {
	var out []string
	for _, n := range ns {
		out = append(out, rd.name(n))
	}
	return out
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// words calls f with each word of s that could be a job name: a maximal run
// of job-name characters without trailing dots (the end of a sentence).
func words(s string, f func(start, end int)) {
	for i := 0; i < len(s); {
		if !nameByte(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && nameByte(s[j]) {
			j++
		}
		end := j
		for end > i && s[end-1] == '.' {
			end--
		}
		if end > i {
			f(i, end)
		}
		i = j
	}
}

// madeName says whether w has the shape of a name trainq gives jobs.
func madeName(w string) bool {
	return (len(w) > len(protocol.JobNamePrefix) && strings.HasPrefix(w, protocol.JobNamePrefix) ||
		len(w) > len(protocol.NotebookNamePrefix) && strings.HasPrefix(w, protocol.NotebookNamePrefix)) &&
		cluster.ValidJobName(w) == nil
}

// namesIn lists the words of s that have the shape of job names.
func namesIn(s string) []string {
	var out []string
	words(s, func(i, j int) {
		if madeName(s[i:j]) {
			out = append(out, s[i:j])
		}
	})
	return out
}

// text replaces every hidden name in s.
func (rd *redactor) text(s string) string {
	if rd.p.Admin() {
		return s
	}
	var b strings.Builder
	last := 0
	words(s, func(i, j int) {
		if rd.hidden(s[i:j]) {
			b.WriteString(s[last:i])
			b.WriteString(hiddenName)
			last = j
		}
	})
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// apply learns the job-shaped names in every string of *v, then replaces
// every hidden name in every string of *v. v must be a pointer.
func (rd *redactor) apply(ctx context.Context, v any) error {
	if rd.p.Admin() {
		return nil
	}
	var found []string
	walkStrings(reflect.ValueOf(v), func(s string) string {
		found = append(found, namesIn(s)...)
		return s
	})
	if err := rd.learn(ctx, found); err != nil {
		return err
	}
	walkStrings(reflect.ValueOf(v), rd.text)
	return nil
}

// walkStrings calls f on every string reachable from v through pointers,
// interfaces, exported struct fields, slices, arrays and map values and
// keys, and stores what f returns where it can.
func walkStrings(v reflect.Value, f func(string) string) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			elem := v.Elem()
			if v.Kind() == reflect.Interface && !elem.CanSet() {
				// A value in an interface cannot be changed in place: copy it.
				cp := reflect.New(elem.Type()).Elem()
				cp.Set(elem)
				walkStrings(cp, f)
				if v.CanSet() {
					v.Set(cp)
				}
				return
			}
			walkStrings(elem, f)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				walkStrings(v.Field(i), f)
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			walkStrings(v.Index(i), f)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			val := v.MapIndex(k)
			cp := reflect.New(val.Type()).Elem()
			cp.Set(val)
			walkStrings(cp, f)
			nk := k
			if k.Kind() == reflect.String {
				if s := f(k.String()); s != k.String() {
					nk = reflect.ValueOf(s).Convert(k.Type())
					v.SetMapIndex(k, reflect.Value{})
				}
			}
			v.SetMapIndex(nk, cp)
		}
	case reflect.String:
		if s := f(v.String()); s != v.String() && v.CanSet() {
			v.SetString(s)
		}
	}
}
