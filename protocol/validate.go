package protocol

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/scheduler"
)

// FieldError is a rejected request field: the API turns it into
// {"error": {"code", "message", "field"}}, the CLI into a sentence.
type FieldError struct {
	Field   string
	Message string
	// Forbidden says the value is well formed but not allowed to this
	// caller (a queue its workspace is not assigned to, a class the queue
	// does not allow): the API answers 403 rather than 422.
	Forbidden bool
	// TooLarge says the request as a whole is too large to keep, and Field
	// is its largest field (the API answers 413 rather than 422).
	TooLarge bool
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// JobTypes are the values ML Space accepts for `type` (cluster says how each runs).
var JobTypes = []string{cluster.TypeBinary, cluster.TypeHorovod, cluster.TypePyTorch, cluster.TypePyTorch2, cluster.TypeTorchrun,
	cluster.TypePyTorchElastic, cluster.TypeNoGPU}

// MaxRetryLimit is the largest max_retry trainq accepts.
const MaxRetryLimit = 100

// CheckedSpec is a job request decoded and checked once, at the edge: the
// normalised JobSpec its workflow is started with (the durable form, as
// it was), and its instance type and priority class parsed. What follows on
// the way in (the configuration's checks, the limits, the queue-length
// check, the workflow's start) takes it, and asks Demand and Class rather
// than parse the strings again. Change the class only with SetClass, and
// not the instance type: the parsed values would no longer match.
type CheckedSpec struct {
	JobSpec
	demand scheduler.Demand
	class  scheduler.Class
}

// ParseSpec checks spec as Normalize does and returns it normalised, with
// its instance type and class parsed.
func ParseSpec(spec JobSpec) (CheckedSpec, []string, error) {
	demand, class, notes, err := spec.normalize()
	if err != nil {
		return CheckedSpec{}, nil, err
	}
	return CheckedSpec{JobSpec: spec, demand: demand, class: class}, notes, nil
}

// Demand is what one worker needs: the instance type, parsed.
func (c *CheckedSpec) Demand() scheduler.Demand { return c.demand }

// Class is the priority class, parsed.
func (c *CheckedSpec) Class() scheduler.Class { return c.class }

// GPUs is the job's total GPU count.
func (c *CheckedSpec) GPUs() int { return c.demand.GPUs * c.NWorkers }

// ShmGB is the /dev/shm a worker gets (see JobSpec.ShmGB).
func (c *CheckedSpec) ShmGB() int { return shmGB(c.ShmSizeClass, c.demand) }

// SetClass gives the job another priority class (its queue's default).
func (c *CheckedSpec) SetClass(class scheduler.Class) {
	c.class, c.PriorityClass = class, class.String()
}

// CheckLimits checks what needs the whole request (see CheckLimits), with
// the instance type parsed.
func (c *CheckedSpec) CheckLimits() error { return checkLimits(c.JobSpec, &c.demand) }

// Normalize fills in defaults and checks everything that can be checked
// without the cluster's configuration. It returns notes about values it
// changed (a notebook's class is always high) and the first bad field. The
// edge calls ParseSpec, which keeps what it parsed; the job's workflow calls
// Normalize on the spec it was started with.
func (s *JobSpec) Normalize() (notes []string, err error) {
	_, _, notes, err = s.normalize()
	return notes, err
}

func (s *JobSpec) normalize() (demand scheduler.Demand, class scheduler.Class, notes []string, err error) {
	fail := func(err error) (scheduler.Demand, scheduler.Class, []string, error) { return demand, class, nil, err }
	if s.Kind == "" {
		s.Kind = scheduler.KindJob
	}
	if s.Kind != scheduler.KindJob && s.Kind != scheduler.KindNotebook {
		return fail(fieldErr("kind", "%q is not allowed; use job or notebook", s.Kind))
	}
	if strings.TrimSpace(s.Script) == "" {
		return fail(fieldErr("script", "must not be empty: give the script path, or a command line for type=binary"))
	}
	if s.InstanceType == "" {
		return fail(fieldErr("instance_type", "is required, for example a100plus.8gpu.80vG.96C.768G"))
	}
	if demand, err = scheduler.ParseInstanceType(s.InstanceType); err != nil {
		return fail(&FieldError{Field: "instance_type", Message: err.Error()})
	}
	if s.NWorkers == 0 {
		s.NWorkers = 1
	}
	if s.NWorkers < 1 {
		return fail(fieldErr("n_workers", "must be at least 1, got %d", s.NWorkers))
	}
	if s.Type == "" {
		s.Type = cluster.TypeBinary
	}
	if !slices.Contains(JobTypes, s.Type) {
		return fail(fieldErr("type", "%q is not allowed; use one of %s", s.Type, strings.Join(JobTypes, ", ")))
	}
	if s.ProcessesPerWorker < 0 {
		return fail(fieldErr("processes_per_worker", "must be a positive number or \"default\", got %d", s.ProcessesPerWorker))
	}
	if s.ProcessesPerWorker == 0 {
		s.ProcessesPerWorker = max(demand.GPUs, 1)
	}
	if s.MaxRetry < 0 || s.MaxRetry > MaxRetryLimit {
		return fail(fieldErr("max_retry", "must be between 0 and %d, got %d", MaxRetryLimit, s.MaxRetry))
	}
	if s.Kind == scheduler.KindNotebook {
		if s.PriorityClass != "" && s.PriorityClass != "high" {
			if _, err := scheduler.ParseClass(s.PriorityClass); err != nil {
				return fail(&FieldError{Field: "priority_class", Message: err.Error()})
			}
			notes = append(notes, fmt.Sprintf("priority_class %q was changed to high: Jupyter servers always run with high priority", s.PriorityClass))
		}
		s.PriorityClass = "high"
	}
	if err := s.Autoshutdown.validate(s.Kind); err != nil {
		return fail(err)
	}
	if plain, ok := SharedClasses[s.PriorityClass]; ok {
		s.RequestedClass, s.PriorityClass = s.PriorityClass, plain
		s.Warn(fmt.Sprintf("priority_class %s runs as %s: trainq ranks ML Space's shared classes as their plain ones", s.RequestedClass, plain))
	}
	if class, err = scheduler.ParseClass(s.PriorityClass); err != nil {
		return fail(&FieldError{Field: "priority_class", Message: err.Error() + " (or ML Space's shared-low, shared-medium)"})
	}
	s.PriorityClass = class.String()
	// Sorted keys: map order does not matter.
	//workflowcheck:ignore
	for _, k := range slices.Sorted(maps.Keys(s.EnvVariables)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fail(fieldErr("env_variables", "%q is not a valid variable name", k))
		}
	}
	// Sorted keys: map order does not matter.
	//workflowcheck:ignore
	for _, k := range slices.Sorted(maps.Keys(s.Flags)) {
		if k == "" || strings.ContainsAny(k, "= \x00") {
			return fail(fieldErr("flags", "%q is not a valid flag name", k))
		}
	}
	return demand, class, notes, nil
}

// Demand is the per-worker demand of a normalized spec.
func (s *JobSpec) Demand() scheduler.Demand {
	d, _ := scheduler.ParseInstanceType(s.InstanceType)
	return d
}

// Class is the priority class of a normalized spec.
func (s *JobSpec) Class() scheduler.Class {
	c, _ := scheduler.ParseClass(s.PriorityClass)
	return c
}

// GPUs is the job's total GPU count.
func (s *JobSpec) GPUs() int { return s.Demand().GPUs * s.NWorkers }

// GangSize is the most workers the job asks the allocator for: n_workers, or
// an elastic gang's elastic_max_workers (at most n_workers), and the fewest it
// may start with (0: it starts whole).
func (s *JobSpec) GangSize() (most, least int) {
	if s.ElasticMaxWorkers > 0 {
		return s.ElasticMaxWorkers, s.ElasticMinWorkers
	}
	return s.NWorkers, 0
}
