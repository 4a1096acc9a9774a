package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// Queue is one of ML Space's queues inside an allocation: the nodes its
// jobs may run on, the priority classes it allows, the class a job or a
// Jupyter server gets when it names none, and the workspaces that may use
// it. A request picks it by queue_name; one that names none goes to the
// allocation's default queue. An allocation without queues has one: default,
// with every node, every class and every workspace.
type Queue struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Type is ML Space's queue type: default, custom or shared.
	Type string `json:"type,omitempty"`
	// Default marks the queue of requests that name none (one per
	// allocation; the first queue when none is marked).
	Default bool `json:"default,omitempty"`
	// Nodes are the names of the allocation's nodes the queue's jobs may
	// run on; empty: all of them.
	Nodes []string `json:"nodes,omitempty"`
	// JobPriorityAllowed are the classes a request may ask for (low,
	// medium, high; ML Space's shared-low and shared-medium mean low and
	// medium); empty: all.
	JobPriorityAllowed []string `json:"job_priority_allowed,omitempty"`
	// DefaultPriority is the class of a request that names none.
	DefaultPriority QueueDefaults `json:"default_priority,omitempty"`
	// Workspaces may submit to the queue; empty: every workspace.
	Workspaces []string `json:"workspaces,omitempty"`
	// IdleTimeout and IdleWarning, when set, override the allocation's
	// idle_timeout and idle_warning for the queue's Jupyter servers
	// ("0s": the queue's idle servers are not stopped).
	IdleTimeout *Duration `json:"idle_timeout,omitempty"`
	IdleWarning *Duration `json:"idle_warning,omitempty"`
}

// QueueDefaults are a queue's default classes, for jobs and for Jupyter
// servers (ML Space's metadata.default_priority).
type QueueDefaults struct {
	Job      string `json:"job,omitempty"`
	Notebook string `json:"notebook,omitempty"`
}

// QueueTypes are the values of a queue's type.
var QueueTypes = []string{"default", "custom", "shared"}

// DefaultQueueName names the queue an allocation without queues has.
const DefaultQueueName = "default"

// QueueList is the allocation's queues: those of the file, or the one
// default queue.
func (a *Allocation) QueueList() []Queue {
	if len(a.Queues) == 0 {
		return []Queue{{Name: DefaultQueueName, Type: "default", Default: true}}
	}
	return a.Queues
}

// DefaultQueue is the queue of requests that name none.
func (a *Allocation) DefaultQueue() Queue {
	qs := a.QueueList()
	for _, q := range qs {
		if q.Default {
			return q
		}
	}
	return qs[0]
}

// QueueNamed finds a queue by name ("" is the default queue); the error
// names the allocation's queues.
func (a *Allocation) QueueNamed(name string) (Queue, error) {
	if name == "" {
		return a.DefaultQueue(), nil
	}
	var names []string
	for _, q := range a.QueueList() {
		if q.Name == name {
			return q, nil
		}
		names = append(names, q.Name)
	}
	return Queue{}, fmt.Errorf("allocation %s has no queue %q; its queues are %s", a.Name, name, strings.Join(names, ", "))
}

// QueueNodes are the allocation's nodes a queue's jobs may run on, in
// config order: all of them when the queue lists none.
func (a *Allocation) QueueNodes(q Queue) []scheduler.Node {
	if len(q.Nodes) == 0 {
		return a.Nodes
	}
	var out []scheduler.Node
	for _, n := range a.Nodes {
		if slices.Contains(q.Nodes, n.Name) {
			out = append(out, n)
		}
	}
	return out
}

// QueueNodeNames are the names of QueueNodes(q).
func (a *Allocation) QueueNodeNames(q Queue) []string {
	out := []string{}
	for _, n := range a.QueueNodes(q) {
		out = append(out, n.Name)
	}
	return out
}

// Allows says whether the queue takes requests of class.
func (q Queue) Allows(class scheduler.Class) bool {
	if len(q.JobPriorityAllowed) == 0 {
		return true
	}
	return slices.Contains(q.AllowedClasses(), class)
}

// AllowedClasses are the classes the queue takes, lowest first.
func (q Queue) AllowedClasses() []scheduler.Class {
	if len(q.JobPriorityAllowed) == 0 {
		return []scheduler.Class{scheduler.Low, scheduler.Medium, scheduler.High}
	}
	var out []scheduler.Class
	for _, name := range q.JobPriorityAllowed {
		if c, err := ParseQueueClass(name); err == nil && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// AllowedText lists the classes the queue takes, for messages.
func (q Queue) AllowedText() string {
	var names []string
	for _, c := range q.AllowedClasses() {
		names = append(names, c.String())
	}
	return strings.Join(names, ", ")
}

// AssignedTo says whether workspace may submit to the queue ("" is a
// caller with no workspace, an operator's CLI: it may).
func (q Queue) AssignedTo(workspace string) bool {
	return len(q.Workspaces) == 0 || workspace == "" || slices.Contains(q.Workspaces, workspace)
}

// ParseQueueClass reads a class as queues name them (job_priority_allowed,
// default_priority, the awaiting-launch-resources priority): low, medium,
// high, and ML Space's shared-low and shared-medium.
func ParseQueueClass(name string) (scheduler.Class, error) {
	switch name {
	case "shared-low":
		return scheduler.Low, nil
	case "shared-medium":
		return scheduler.Medium, nil
	case "low", "medium", "high":
		return scheduler.ParseClass(name)
	}
	return scheduler.Medium, fmt.Errorf("%q is not a priority class; use low, medium, high (or ML Space's shared-low, shared-medium)", name)
}

// validateQueues checks an allocation's queues: unique names, nodes of the
// allocation, known classes, defaults the queue allows, one default queue.
func (a *Allocation) validateQueues(field string) error {
	names := map[string]bool{}
	nodes := map[string]bool{}
	for _, n := range a.Nodes {
		nodes[n.Name] = true
	}
	defaults := 0
	for qi, q := range a.Queues {
		qf := fmt.Sprintf("%s.queues[%d]", field, qi)
		if !protocol.ValidName(q.Name) {
			return fmt.Errorf("%s.name: %q is not a valid name (letters, digits, '-', '_', '.')", qf, q.Name)
		}
		if names[q.Name] {
			return fmt.Errorf("%s.name: queue %q appears twice in allocation %s", qf, q.Name, a.Name)
		}
		names[q.Name] = true
		if q.Type != "" && !slices.Contains(QueueTypes, q.Type) {
			return fmt.Errorf("%s.type: %q is not allowed; use %s", qf, q.Type, strings.Join(QueueTypes, ", "))
		}
		if q.Default {
			defaults++
		}
		if len(a.NodeSelector) > 0 && len(q.Nodes) > 0 {
			return fmt.Errorf("%s.nodes: allocation %s picks its nodes by node_selector; its queues take all of them", qf, a.Name)
		}
		for ni, n := range q.Nodes {
			if !nodes[n] {
				return fmt.Errorf("%s.nodes[%d]: allocation %s has no node %q", qf, ni, a.Name, n)
			}
		}
		for ci, c := range q.JobPriorityAllowed {
			if _, err := ParseQueueClass(c); err != nil {
				return fmt.Errorf("%s.job_priority_allowed[%d]: %w", qf, ci, err)
			}
		}
		for _, d := range []struct{ name, class string }{{"job", q.DefaultPriority.Job}, {"notebook", q.DefaultPriority.Notebook}} {
			if d.class == "" {
				continue
			}
			c, err := ParseQueueClass(d.class)
			if err != nil {
				return fmt.Errorf("%s.default_priority.%s: %w", qf, d.name, err)
			}
			if !q.Allows(c) {
				return fmt.Errorf("%s.default_priority.%s: %s is not among the queue's job_priority_allowed (%s)", qf, d.name, d.class, q.AllowedText())
			}
		}
		for wi, w := range q.Workspaces {
			if !protocol.ValidName(w) {
				return fmt.Errorf("%s.workspaces[%d]: %q is not a valid workspace name", qf, wi, w)
			}
		}
	}
	if defaults > 1 {
		return fmt.Errorf("%s.queues: %d queues are marked default; mark one", field, defaults)
	}
	return nil
}

// DefaultClass is the class a request of kind gets in the queue when it
// names none: the queue's default_priority, else medium for a job (high
// for a Jupyter server) when the queue allows it, else the queue's highest
// allowed class.
func (q Queue) DefaultClass(kind scheduler.Kind) scheduler.Class {
	name, fallback := q.DefaultPriority.Job, scheduler.Medium
	if kind == scheduler.KindNotebook {
		name, fallback = q.DefaultPriority.Notebook, scheduler.High
	}
	if c, err := ParseQueueClass(name); err == nil {
		return c
	}
	if q.Allows(fallback) {
		return fallback
	}
	allowed := q.AllowedClasses()
	return allowed[len(allowed)-1]
}
