package protocol

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/scheduler"
)

// The RunJobRequest fields past trainq's first sixteen: what ML Space users
// send. Each either does what ML Space says or is accepted with a warning
// that says what trainq does instead (JobSpec.Warnings, the POST answer's
// `warnings`): an existing request must run, and must not pretend.

// Shared-queue classes: ML Space's classes for an allocation's shared
// queue. trainq ranks them as their plain classes (a queue of type shared
// may allow only them), and the request gets a warning saying so.
var SharedClasses = map[string]string{"shared-low": "low", "shared-medium": "medium"}

// ShmSizeClasses are shm_size_class's values and their /dev/shm size per GPU
// in GB (on Kubernetes; see cluster.WorkerSpec.ShmGB).
var ShmSizeClasses = map[string]int{"small": 16, "medium": 32, "large": 64}

// ShmGB is the /dev/shm a worker of the spec gets: shm_size_class's size
// per GPU times the worker's GPUs (one for a CPU-only worker); 0 when the
// request named no class.
func (s *JobSpec) ShmGB() int { return shmGB(s.ShmSizeClass, s.Demand()) }

func shmGB(class string, d scheduler.Demand) int {
	per, ok := ShmSizeClasses[class]
	if !ok {
		return 0
	}
	return per * max(d.GPUs, 1)
}

// DeprecatedFields are RunJobRequest fields ML Space keeps for old scripts
// and that have no effect there either.
var DeprecatedFields = []string{"cuda11", "forbid_internet", "forbid_s3", "in_communal_cluster", "preflight_check"}

// ML Space's ranges.
const (
	MinLogPeriodMinutes   = 20
	MLSpaceMaxLogPeriod   = 720
	MaxStopTimerMinutes   = 365 * 24 * 60
	MaxElasticMaxRestarts = 1000
	// DefaultElasticMaxRestarts is ML Space's elastic_max_restarts when a request has none.
	DefaultElasticMaxRestarts = 5
	MaxNodeListLen            = 1024
)

// HealthSubActionNotify is health_params.sub_actions' one value.
const HealthSubActionNotify = "notify"

// IntOrDefault is a JSON number or "default" (0 after decoding).
type IntOrDefault int

// UnmarshalJSON accepts a whole number from 1, "default", or a number in a
// string.
func (v *IntOrDefault) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	if strings.EqualFold(strings.TrimSpace(s), "default") {
		*v = 0
		return nil
	}
	var n int
	if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil || n < 1 || n > MaxNWorkers || fmt.Sprint(n) != strings.TrimSpace(s) {
		return fmt.Errorf("%q is not allowed; use a number from 1 to %d, or \"default\"", s, MaxNWorkers)
	}
	*v = IntOrDefault(n)
	return nil
}

// mlspaceFields are the RunJobRequest fields decoded by decodeMLSpaceFields.
type mlspaceFields struct {
	QueueName          string        `json:"queue_name"`
	Internet           *bool         `json:"internet"`
	CondaEnv           string        `json:"conda_env"`
	ShmSizeClass       string        `json:"shm_size_class"`
	PytorchUseEnv      *bool         `json:"pytorch_use_env"`
	ElasticMinWorkers  *IntOrDefault `json:"elastic_min_workers"`
	ElasticMaxWorkers  *IntOrDefault `json:"elastic_max_workers"`
	ElasticMaxRestarts *int          `json:"elastic_max_restarts"`
	IncludeNodes       []string      `json:"include_nodes"`
	ExcludeNodes       []string      `json:"exclude_nodes"`
	TmpStorage         string        `json:"tmp_storage"`
	StopTimer          *int          `json:"stop_timer"`
	Cuda11             *bool         `json:"cuda11"`
	ForbidInternet     *bool         `json:"forbid_internet"`
	ForbidS3           *bool         `json:"forbid_s3"`
	InCommunalCluster  *bool         `json:"in_communal_cluster"`
	PreflightCheck     *bool         `json:"preflight_check"`
	// trainq's own: how a gang's workers share the allocation's topology.
	RequiredTopology  string `json:"required_topology"`
	PreferredTopology string `json:"preferred_topology"`
	NoMove            *bool  `json:"no_move"`
}

// applyMLSpaceFields checks the fields and writes them into spec, with a
// warning for each one trainq accepts without doing all it says.
func applyMLSpaceFields(r RunJobRequest, spec *JobSpec) error {
	f := r.mlspaceFields
	warn := func(format string, args ...any) { spec.Warn(fmt.Sprintf(format, args...)) }
	if f.QueueName != "" {
		if err := checkName("queue_name", f.QueueName); err != nil {
			return err
		}
		spec.QueueName = f.QueueName
	}
	if f.Internet != nil {
		spec.Internet = f.Internet
	}
	if f.CondaEnv != "" {
		if len(f.CondaEnv) > MaxPathBytes || strings.ContainsAny(f.CondaEnv, "\x00\n") {
			return fieldErr("conda_env", "must be an environment name or a path of at most %d bytes on one line", MaxPathBytes)
		}
		spec.CondaEnv = f.CondaEnv
	}
	if f.ShmSizeClass != "" {
		if _, ok := ShmSizeClasses[f.ShmSizeClass]; !ok {
			return fieldErr("shm_size_class", "%q is not allowed; use small (16 GB per GPU), medium (32 GB) or large (64 GB)", f.ShmSizeClass)
		}
		spec.ShmSizeClass = f.ShmSizeClass
	}
	if f.PytorchUseEnv != nil && *f.PytorchUseEnv {
		if spec.Type != "pytorch2" {
			return fieldErr("pytorch_use_env", "is only for type pytorch2 (torch.distributed.launch), not %q", typeOrDefault(spec.Type))
		}
		spec.PytorchUseEnv = true
	}
	if err := applyElastic(f, spec); err != nil {
		return err
	}
	topology, err := ParseGangTopology(f.RequiredTopology, f.PreferredTopology)
	if err != nil {
		return err
	}
	spec.Topology = topology
	spec.NoMove = f.NoMove != nil && *f.NoMove
	for _, l := range []struct {
		field string
		nodes []string
		to    *[]string
	}{{"include_nodes", f.IncludeNodes, &spec.IncludeNodes}, {"exclude_nodes", f.ExcludeNodes, &spec.ExcludeNodes}} {
		if len(l.nodes) > MaxNodeListLen {
			return fieldErr(l.field, "lists %d nodes; at most %d are allowed", len(l.nodes), MaxNodeListLen)
		}
		for i, n := range l.nodes {
			if err := checkName(fmt.Sprintf("%s[%d]", l.field, i), n); err != nil {
				return err
			}
		}
		if len(l.nodes) > 0 {
			*l.to = slices.Compact(slices.Sorted(slices.Values(l.nodes)))
		}
	}
	for _, n := range spec.IncludeNodes {
		if slices.Contains(spec.ExcludeNodes, n) {
			return fieldErr("exclude_nodes", "%s is also in include_nodes; a node cannot be both", n)
		}
	}
	if f.TmpStorage != "" {
		if err := checkName("tmp_storage", f.TmpStorage); err != nil {
			return err
		}
		spec.TmpStorage = f.TmpStorage
		warn("tmp_storage %s is ignored: trainq has no temporary storage presets; /tmp is the node's", f.TmpStorage)
	}
	if f.StopTimer != nil {
		if *f.StopTimer < 0 || *f.StopTimer > MaxStopTimerMinutes {
			return fieldErr("stop_timer", "must be between 0 (never) and %d minutes, got %d", MaxStopTimerMinutes, *f.StopTimer)
		}
		spec.TimeLimit = time.Duration(*f.StopTimer) * time.Minute
	}
	for _, d := range []struct {
		name string
		v    *bool
	}{{"cuda11", f.Cuda11}, {"forbid_internet", f.ForbidInternet}, {"forbid_s3", f.ForbidS3},
		{"in_communal_cluster", f.InCommunalCluster}, {"preflight_check", f.PreflightCheck}} {
		if d.v == nil {
			continue
		}
		if spec.Deprecated == nil {
			spec.Deprecated = map[string]bool{}
		}
		spec.Deprecated[d.name] = *d.v
		warn("%s is deprecated in ML Space and has no effect", d.name)
	}
	return nil
}

// applyElastic checks the elastic fields: pytorch_elastic only, min ≤ max ≤
// n_workers. The allocator starts the gang with as many workers as fit, from
// elastic_min_workers to elastic_max_workers (scheduler.Request.MinWorkers), and
// the launcher runs with torchrun's --nnodes=min:max.
func applyElastic(f mlspaceFields, spec *JobSpec) error {
	if f.ElasticMinWorkers == nil && f.ElasticMaxWorkers == nil && f.ElasticMaxRestarts == nil {
		return nil
	}
	if spec.Type != cluster.TypePyTorchElastic {
		// client_lib sends the elastic fields' defaults with every job, whatever its type: they
		// ask for nothing, so only a value of its own is an error.
		for _, d := range []struct {
			field string
			own   bool
		}{
			{"elastic_min_workers", f.ElasticMinWorkers != nil && *f.ElasticMinWorkers != 0},
			{"elastic_max_workers", f.ElasticMaxWorkers != nil && *f.ElasticMaxWorkers != 0},
			{"elastic_max_restarts", f.ElasticMaxRestarts != nil && *f.ElasticMaxRestarts != DefaultElasticMaxRestarts},
		} {
			if d.own {
				return fieldErr(d.field, "is only for type pytorch_elastic, not %q (its default is accepted for every type)", typeOrDefault(spec.Type))
			}
		}
		return nil
	}
	n := max(spec.NWorkers, 1)
	lo, hi := n, n
	if f.ElasticMaxWorkers != nil && *f.ElasticMaxWorkers != 0 {
		hi = int(*f.ElasticMaxWorkers)
	}
	if f.ElasticMinWorkers != nil && *f.ElasticMinWorkers != 0 {
		lo = int(*f.ElasticMinWorkers)
	}
	if hi > n {
		return fieldErr("elastic_max_workers", "%d is more than n_workers (%d): the gang has at most n_workers workers", hi, n)
	}
	if lo > hi {
		return fieldErr("elastic_min_workers", "%d is more than elastic_max_workers (%d)", lo, hi)
	}
	spec.ElasticMinWorkers, spec.ElasticMaxWorkers = lo, hi
	spec.ElasticMaxRestarts = DefaultElasticMaxRestarts
	if f.ElasticMaxRestarts != nil {
		if *f.ElasticMaxRestarts < 0 || *f.ElasticMaxRestarts > MaxElasticMaxRestarts {
			return fieldErr("elastic_max_restarts", "must be between 0 and %d, got %d", MaxElasticMaxRestarts, *f.ElasticMaxRestarts)
		}
		spec.ElasticMaxRestarts = *f.ElasticMaxRestarts
	}
	return nil
}

func typeOrDefault(t string) string {
	if t == "" {
		return cluster.TypeBinary
	}
	return t
}

// checkName accepts a name of a queue, node or preset: visible characters,
// at most MaxNameBytes.
func checkName(field, v string) error {
	if v == "" || len(v) > MaxNameBytes || strings.IndexFunc(v, func(c rune) bool { return c <= ' ' || c == 0x7f }) >= 0 {
		return fieldErr(field, "%q is not a name: use 1 to %d visible characters", v, MaxNameBytes)
	}
	return nil
}

// ParseGangTopology reads required_topology and preferred_topology (at most
// one of them, a level name); whether the allocation has that level is
// checked against its configuration (scheduler.Pool.Admit).
func ParseGangTopology(required, preferred string) (scheduler.GangTopology, error) {
	switch {
	case required != "" && preferred != "":
		return scheduler.GangTopology{}, fieldErr("preferred_topology", "set required_topology or preferred_topology, not both")
	case required != "":
		if err := checkName("required_topology", required); err != nil {
			return scheduler.GangTopology{}, err
		}
		return scheduler.GangTopology{Level: required, Required: true}, nil
	case preferred != "":
		if err := checkName("preferred_topology", preferred); err != nil {
			return scheduler.GangTopology{}, err
		}
		return scheduler.GangTopology{Level: preferred}, nil
	}
	return scheduler.GangTopology{}, nil
}

// MaxNameBytes bounds queue, node and preset names.
const MaxNameBytes = 253

// RunJobParams is a job's RunJobRequest as ML Space's GET
// /jobs/{job_name}/params answers it: every field, with trainq's defaults
// filled in (logs_dir is not kept, so it is empty).
type RunJobParams struct {
	Script             string            `json:"script"`
	BaseImage          string            `json:"base_image"`
	InstanceType       string            `json:"instance_type"`
	Region             string            `json:"region"`
	AllocationName     string            `json:"allocation_name"`
	NWorkers           int               `json:"n_workers"`
	Type               string            `json:"type"`
	ProcessesPerWorker int               `json:"processes_per_worker"`
	JobDesc            string            `json:"job_desc"`
	PriorityClass      string            `json:"priority_class"`
	MaxRetry           int               `json:"max_retry"`
	EnvVariables       map[string]string `json:"env_variables"`
	Flags              map[string]string `json:"flags"`
	CheckpointDir      string            `json:"checkpoint_dir"`
	LogsDir            string            `json:"logs_dir"`
	HealthParams       *ParamsHealth     `json:"health_params"`
	QueueName          string            `json:"queue_name"`
	Internet           *bool             `json:"internet"`
	CondaEnv           string            `json:"conda_env"`
	ShmSizeClass       string            `json:"shm_size_class"`
	PytorchUseEnv      bool              `json:"pytorch_use_env"`
	ElasticMinWorkers  any               `json:"elastic_min_workers"`
	ElasticMaxWorkers  any               `json:"elastic_max_workers"`
	ElasticMaxRestarts int               `json:"elastic_max_restarts"`
	IncludeNodes       []string          `json:"include_nodes"`
	ExcludeNodes       []string          `json:"exclude_nodes"`
	TmpStorage         string            `json:"tmp_storage"`
	StopTimer          int               `json:"stop_timer"`
	Cuda11             bool              `json:"cuda11"`
	ForbidInternet     bool              `json:"forbid_internet"`
	ForbidS3           bool              `json:"forbid_s3"`
	InCommunalCluster  bool              `json:"in_communal_cluster"`
	PreflightCheck     bool              `json:"preflight_check"`
	RequiredTopology   string            `json:"required_topology,omitempty"`
	PreferredTopology  string            `json:"preferred_topology,omitempty"`
	NoMove             bool              `json:"no_move,omitempty"`
}

// ParamsHealth is health_params as RunJobParams shows it.
type ParamsHealth struct {
	LogPeriod  int      `json:"log_period"`
	Action     string   `json:"action"`
	SubActions []string `json:"sub_actions"`
}

// Params is the spec as ML Space's RunJobRequest.
func (s JobSpec) Params() RunJobParams {
	class := s.PriorityClass
	if s.RequestedClass != "" {
		class = s.RequestedClass
	}
	p := RunJobParams{
		Script: s.Script, BaseImage: s.BaseImage, InstanceType: s.InstanceType, Region: s.Region, AllocationName: s.AllocationName,
		NWorkers: s.NWorkers, Type: s.Type, ProcessesPerWorker: s.ProcessesPerWorker, JobDesc: s.JobDesc, PriorityClass: class,
		MaxRetry: s.MaxRetry, EnvVariables: nonNil(s.EnvVariables), Flags: nonNil(s.Flags), CheckpointDir: s.CheckpointDir,
		QueueName: s.QueueName, Internet: s.Internet, CondaEnv: s.CondaEnv, ShmSizeClass: s.ShmSizeClass,
		PytorchUseEnv: s.PytorchUseEnv, ElasticMinWorkers: "default", ElasticMaxWorkers: "default", ElasticMaxRestarts: s.ElasticMaxRestarts,
		IncludeNodes: nonNilList(s.IncludeNodes), ExcludeNodes: nonNilList(s.ExcludeNodes), TmpStorage: s.TmpStorage,
		StopTimer: int(s.TimeLimit / time.Minute), Cuda11: s.Deprecated["cuda11"], ForbidInternet: s.Deprecated["forbid_internet"],
		ForbidS3: s.Deprecated["forbid_s3"], InCommunalCluster: s.Deprecated["in_communal_cluster"], PreflightCheck: s.Deprecated["preflight_check"],
	}
	if s.QueueName == "" {
		p.QueueName = "default"
	}
	p.NoMove = s.NoMove
	if s.Topology.Required {
		p.RequiredTopology = s.Topology.Level
	} else {
		p.PreferredTopology = s.Topology.Level
	}
	if s.ElasticMaxWorkers > 0 {
		p.ElasticMinWorkers, p.ElasticMaxWorkers = s.ElasticMinWorkers, s.ElasticMaxWorkers
	}
	if h := s.Health; h != nil {
		p.HealthParams = &ParamsHealth{LogPeriod: int(h.LogPeriod / time.Minute), Action: h.Action, SubActions: []string{}}
		if h.Notify {
			p.HealthParams.SubActions = []string{HealthSubActionNotify}
		}
	}
	return p
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func nonNilList(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}
