package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RunJobRequest is ML Space's RunJobRequest as JSON, as `trainq submit -f`
// and `POST /public/v2/jobs` read it. Decoding is strict: a field not listed
// here is rejected, naming it.
type RunJobRequest struct {
	Script             string              `json:"script"`
	BaseImage          string              `json:"base_image"`
	InstanceType       string              `json:"instance_type"`
	Region             string              `json:"region"`
	AllocationName     string              `json:"allocation_name"`
	NWorkers           *int                `json:"n_workers"`
	Type               string              `json:"type"`
	ProcessesPerWorker *ProcessesPerWorker `json:"processes_per_worker"`
	JobDesc            string              `json:"job_desc"`
	PriorityClass      string              `json:"priority_class"`
	MaxRetry           *int                `json:"max_retry"`
	EnvVariables       map[string]string   `json:"env_variables"`
	Flags              map[string]string   `json:"flags"`
	CheckpointDir      string              `json:"checkpoint_dir"`
	HealthParams       *HealthParams       `json:"health_params"`
	// Accepted because ML Space documents it, but not used by trainq.
	LogsDir string `json:"logs_dir"`
	// The rest of ML Space's fields (see mlspace_fields.go).
	mlspaceFields
}

// HealthParams is ML Space's stuck-job detection: a job whose workers write
// no log line for log_period minutes is stuck, and is restarted (a new
// attempt) or deleted. It becomes JobSpec.Health.
type HealthParams struct {
	LogPeriod *int   `json:"log_period"` // minutes without new log lines
	Action    string `json:"action"`     // restart (the default) or delete
	// SubActions may hold "notify": a stuck job is also reported as an
	// event (a log line and a metric).
	SubActions []string `json:"sub_actions"`
}

// MaxLogPeriodMinutes bounds health_params.log_period: ML Space's 12 hours.
const MaxLogPeriodMinutes = MLSpaceMaxLogPeriod

// RunJobRequestFieldNames lists the accepted fields, in documentation order.
var RunJobRequestFieldNames = []string{"script", "base_image", "instance_type", "region", "allocation_name", "n_workers", "type",
	"processes_per_worker", "job_desc", "priority_class", "max_retry", "env_variables", "flags", "checkpoint_dir", "logs_dir", "health_params",
	"queue_name", "internet", "conda_env", "shm_size_class", "pytorch_use_env", "elastic_min_workers", "elastic_max_workers",
	"elastic_max_restarts", "include_nodes", "exclude_nodes", "tmp_storage", "stop_timer",
	"cuda11", "forbid_internet", "forbid_s3", "in_communal_cluster", "preflight_check"}

// TrainqFieldNames are the fields trainq accepts beyond ML Space's.
var TrainqFieldNames = []string{"required_topology", "preferred_topology", "no_move"}

// acceptedFieldNames is ML Space's fields, then trainq's own.
var acceptedFieldNames = slices.Concat(RunJobRequestFieldNames, TrainqFieldNames)

// RunJobRequestFields lists the accepted fields, for the unknown-field message.
var RunJobRequestFields = strings.Join(acceptedFieldNames, ", ")

// ProcessesPerWorker is processes_per_worker in JSON: a number or "default"
// (0 after decoding: one process per GPU).
type ProcessesPerWorker int

// UnmarshalJSON accepts a positive whole number, or "default"; a number in a
// string ("4") is accepted too.
func (p *ProcessesPerWorker) UnmarshalJSON(b []byte) error {
	var s string
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	} else {
		s = string(b)
	}
	n, err := ParseProcessesPerWorker(s)
	if err != nil {
		return &FieldError{Field: "processes_per_worker", Message: err.Error()}
	}
	*p = ProcessesPerWorker(n)
	return nil
}

// ParseProcessesPerWorker parses a number or "default" (0).
func ParseProcessesPerWorker(s string) (int, error) {
	if strings.EqualFold(strings.TrimSpace(s), "default") {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > MaxProcessesPerWorker {
		return 0, fmt.Errorf("%q is not allowed; use a number from 1 to %d, or \"default\" (one per GPU)", s, MaxProcessesPerWorker)
	}
	return n, nil
}

// JSONError says why a request is not a well-formed RunJobRequest object:
// bad syntax, the wrong shape, a wrong JSON type or an unknown field. Field
// names the field when there is one. Value errors are *FieldError instead.
type JSONError struct {
	Reason  string // one of the JSON* reasons below
	Field   string
	Line    int // 1-based position of a syntax error, 0 otherwise
	Column  int
	Message string // a sentence that does not name the source
}

// JSONError reasons.
const (
	JSONSyntax       = "invalid_json"
	JSONEmpty        = "empty_body"
	JSONTruncated    = "truncated_json"
	JSONNotObject    = "not_an_object"
	JSONTrailingData = "trailing_data"
	JSONUnknownField = "unknown_field"
	JSONDuplicate    = "duplicate_field"
	JSONWrongType    = "wrong_type"
)

func (e *JSONError) Error() string { return e.Message }

// DecodeRunJobRequest strictly decodes one RunJobRequest JSON object into a
// JobSpec. Errors are *JSONError for malformed input and *FieldError for a
// bad value; both name the field. Notes say which fields are ignored. It
// checks the limits (CheckLimits) too.
func DecodeRunJobRequest(data []byte) (spec JobSpec, notes []string, err error) {
	d, err := DecodeRunJob(data)
	if err == nil {
		err = CheckLimits(d.Spec)
	}
	return d.Spec, d.Notes, err
}

// DecodedRunJob is a decoded RunJobRequest: the spec, notes about ignored
// fields, and logs_dir, which the spec does not keep (the REST API checks it
// against the workspace's directory).
type DecodedRunJob struct {
	Spec    JobSpec
	Notes   []string
	LogsDir string
}

// DecodeRunJob is DecodeRunJobRequest that also returns logs_dir, and leaves
// the limits to the caller: they need the instance type parsed, which
// ParseSpec does once (CheckedSpec.CheckLimits).
func DecodeRunJob(data []byte) (DecodedRunJob, error) {
	spec, notes, err := decodeRunJob(data)
	d := DecodedRunJob{Spec: spec, Notes: notes}
	if err == nil {
		var r struct {
			LogsDir string `json:"logs_dir"`
		}
		_ = json.Unmarshal(data, &r) // already decoded once: cannot fail
		d.LogsDir = r.LogsDir
	}
	return d, err
}

func decodeRunJob(data []byte) (spec JobSpec, notes []string, err error) {
	var r RunJobRequest
	if err := DecodeStrictJSON(data, &r, acceptedFieldNames, "RunJobRequest"); err != nil {
		return spec, nil, err
	}
	spec = JobSpec{
		Script: r.Script, BaseImage: r.BaseImage, InstanceType: r.InstanceType, Region: r.Region,
		AllocationName: r.AllocationName, Type: r.Type, JobDesc: r.JobDesc, PriorityClass: r.PriorityClass,
		EnvVariables: r.EnvVariables, Flags: r.Flags, CheckpointDir: r.CheckpointDir,
	}
	if r.NWorkers != nil {
		if *r.NWorkers < 1 || *r.NWorkers > MaxNWorkers {
			return spec, nil, &FieldError{Field: "n_workers", Message: fmt.Sprintf("must be between 1 and %d, got %d", MaxNWorkers, *r.NWorkers)}
		}
		spec.NWorkers = *r.NWorkers
	}
	if r.ProcessesPerWorker != nil {
		spec.ProcessesPerWorker = int(*r.ProcessesPerWorker)
	}
	if r.MaxRetry != nil {
		if *r.MaxRetry < 0 || *r.MaxRetry > MaxRetryLimit {
			return spec, nil, &FieldError{Field: "max_retry", Message: fmt.Sprintf("must be between 0 and %d, got %d", MaxRetryLimit, *r.MaxRetry)}
		}
		spec.MaxRetry = *r.MaxRetry
	}
	if len(r.CheckpointDir) > MaxPathBytes {
		return spec, nil, &FieldError{Field: "checkpoint_dir", Message: fmt.Sprintf("is %d bytes; a path may have at most %d", len(r.CheckpointDir), MaxPathBytes)}
	}
	if len(r.LogsDir) > MaxPathBytes || strings.ContainsRune(r.LogsDir, 0) {
		return spec, nil, &FieldError{Field: "logs_dir", Message: fmt.Sprintf("must be a path of at most %d bytes without NUL characters", MaxPathBytes)}
	}
	if hp := r.HealthParams; hp != nil {
		if hp.LogPeriod != nil && (*hp.LogPeriod < MinLogPeriodMinutes || *hp.LogPeriod > MaxLogPeriodMinutes) {
			return spec, nil, &FieldError{Field: "health_params.log_period",
				Message: fmt.Sprintf("must be between %d and %d (minutes), got %d", MinLogPeriodMinutes, MaxLogPeriodMinutes, *hp.LogPeriod)}
		}
		if hp.Action != "" && hp.Action != HealthActionRestart && hp.Action != HealthActionDelete {
			return spec, nil, &FieldError{Field: "health_params.action", Message: fmt.Sprintf("%q is not allowed; use restart or delete", hp.Action)}
		}
		notify := false
		for i, a := range hp.SubActions {
			if a != HealthSubActionNotify {
				return spec, nil, &FieldError{Field: fmt.Sprintf("health_params.sub_actions[%d]", i), Message: fmt.Sprintf("%q is not allowed; use notify", a)}
			}
			notify = true
		}
		if hp.LogPeriod == nil {
			notes = append(notes, "health_params has no log_period: trainq does not watch this job for stuck logs")
		} else {
			action := hp.Action
			if action == "" {
				action = HealthActionRestart
			}
			spec.Health = &JobHealth{LogPeriod: time.Duration(*hp.LogPeriod) * time.Minute, Action: action, Notify: notify}
		}
	}
	if err := applyMLSpaceFields(r, &spec); err != nil {
		return spec, nil, err
	}
	if err := CheckStrings(spec); err != nil {
		return spec, nil, err
	}
	if r.LogsDir != "" {
		notes = append([]string{"logs_dir is ignored: trainq keeps each worker's log under its data_dir (see `trainq logs`)"}, notes...)
	}
	return spec, notes, nil
}

// DecodeStrictJSON decodes one JSON object into v, rejecting unknown fields,
// fields written in another case than the lower-case names in fields,
// repeated fields and data after the object. Errors are *JSONError, or a
// *FieldError from a field's own decoder; what names the object in messages.
func DecodeStrictJSON(data []byte, v any, fields []string, what string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field ") {
			// encoding/json does not say where: find the key's path.
			if kerr := checkKeys(data, fields, what); kerr != nil {
				return kerr
			}
		}
		return decodeError(data, err, fields, what)
	}
	var rest any
	if err := dec.Decode(&rest); !errors.Is(err, io.EOF) {
		return &JSONError{Reason: JSONTrailingData, Message: "unexpected data after the JSON object; send one " + what}
	}
	// encoding/json matches keys case-insensitively and lets the last of
	// two equal keys win; an API must not be that lenient.
	return checkKeys(data, fields, what)
}

// MaxArgBytes bounds the script and each environment variable and flag:
// Linux refuses a single argument or environment string over 128 KiB
// (MAX_ARG_STRLEN), so a longer one could never start.
const MaxArgBytes = 64 << 10

// CheckStrings rejects NUL bytes, which no command line, environment or
// path can carry, and values longer than MaxArgBytes. An entry of
// env_variables or flags is named by its path, e.g. env_variables.A.
func CheckStrings(s JobSpec) error {
	if len(s.Script) > MaxArgBytes {
		return &FieldError{Field: "script", Message: fmt.Sprintf("is %d bytes; at most %d are allowed (put a long script in a file)", len(s.Script), MaxArgBytes)}
	}
	for _, f := range []struct{ name, v string }{
		{"script", s.Script}, {"base_image", s.BaseImage}, {"instance_type", s.InstanceType}, {"region", s.Region},
		{"allocation_name", s.AllocationName}, {"type", s.Type}, {"job_desc", s.JobDesc},
		{"priority_class", s.PriorityClass}, {"checkpoint_dir", s.CheckpointDir},
	} {
		if strings.ContainsRune(f.v, 0) {
			return &FieldError{Field: f.name, Message: "must not contain NUL characters"}
		}
	}
	for _, m := range []struct {
		field string
		m     map[string]string
	}{{"env_variables", s.EnvVariables}, {"flags", s.Flags}} {
		for _, k := range slices.Sorted(maps.Keys(m.m)) {
			v := m.m[k]
			if len(k)+len(v) > MaxArgBytes {
				return &FieldError{Field: EntryPath(m.field, k), Message: fmt.Sprintf("is %d bytes with its name; at most %d are allowed", len(k)+len(v), MaxArgBytes)}
			}
			if strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0) {
				return &FieldError{Field: EntryPath(m.field, k), Message: "must not contain NUL characters"}
			}
		}
	}
	return nil
}

// EntryPath names an entry of a map field, e.g. env_variables.A; a very long
// key is shortened.
func EntryPath(field, key string) string {
	const keyMax = 64
	if len(key) > keyMax {
		key = strings.ToValidUTF8(key[:keyMax], "") + "…"
	}
	return field + "." + key
}

// keyRule says how the keys of a nested JSON object are checked: an object
// with fixed fields (exact, lower-case names) or a map (any key, once).
type keyRule struct {
	fields []string // nil: a map
	what   string   // names the object in messages
}

// nestedKeys are the rules for the objects inside a request, by the name of
// the field that holds them. Every request type that has one of these
// fields gives it this shape.
var nestedKeys = map[string]keyRule{
	"health_params": {fields: []string{"log_period", "action", "sub_actions"}, what: "health_params"},
	"env_variables": {what: "env_variables"},
	"flags":         {what: "flags"},
}

// checkKeys walks syntactically valid data and rejects, at every depth,
// repeated keys and keys that differ in case from a field name (encoding/json
// matches those case-insensitively and lets the last repeated key win). The
// error's field is the key's path, e.g. env_variables.A.
func checkKeys(data []byte, fields []string, what string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil // the decoder has reported it already
	}
	return checkObject(dec, keyRule{fields: fields, what: what}, "", true)
}

// checkObject checks the keys of the object whose '{' was just read, and
// reads up to and including its '}'.
func checkObject(dec *json.Decoder, rule keyRule, path string, top bool) error {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		field := key
		if path != "" {
			field = path + "." + key
		}
		if seen[key] {
			return &JSONError{Reason: JSONDuplicate, Field: field, Message: fmt.Sprintf("field %q appears twice", field)}
		}
		seen[key] = true
		if rule.fields != nil && !slices.Contains(rule.fields, key) {
			msg := fmt.Sprintf("unknown field %q; %s fields are %s (lower case)", field, rule.what, strings.Join(rule.fields, ", "))
			return &JSONError{Reason: JSONUnknownField, Field: field, Message: msg}
		}
		tok, err = dec.Token()
		if err != nil {
			return nil
		}
		switch tok {
		case json.Delim('{'):
			nested, ok := nestedKeys[key]
			if !top || rule.fields == nil || !ok {
				nested = keyRule{what: field} // a map: only repeated keys are wrong
			}
			if err := checkObject(dec, nested, field, false); err != nil {
				return err
			}
		case json.Delim('['):
			if err := checkArray(dec, field); err != nil {
				return err
			}
		}
	}
	_, _ = dec.Token() // }
	return nil
}

// checkArray checks the objects inside the array whose '[' was just read.
func checkArray(dec *json.Decoder, path string) error {
	for i := 0; dec.More(); i++ {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		elem := fmt.Sprintf("%s[%d]", path, i)
		switch tok {
		case json.Delim('{'):
			if err := checkObject(dec, keyRule{what: elem}, elem, false); err != nil {
				return err
			}
		case json.Delim('['):
			if err := checkArray(dec, elem); err != nil {
				return err
			}
		}
	}
	_, _ = dec.Token() // ]
	return nil
}

// decodeError turns encoding/json errors into errors naming the field.
func decodeError(data []byte, err error, fields []string, what string) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe
	}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return &JSONError{Reason: JSONNotObject, Message: fmt.Sprintf("the %s must be a JSON object, not %s", what, typeErr.Value)}
		}
		return &JSONError{Reason: JSONWrongType, Field: field,
			Message: fmt.Sprintf("a JSON %s is not allowed here; want %s", typeErr.Value, jsonKind(typeErr.Type.String()))}
	case errors.As(err, &syntaxErr):
		line, col := position(data, syntaxErr.Offset)
		return &JSONError{Reason: JSONSyntax, Line: line, Column: col,
			Message: fmt.Sprintf("invalid JSON at line %d, column %d: %s", line, col, strings.TrimPrefix(err.Error(), "json: "))}
	case errors.Is(err, io.EOF):
		return &JSONError{Reason: JSONEmpty, Message: "the body is empty; it should hold one " + what + " JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &JSONError{Reason: JSONTruncated, Message: "invalid JSON: the object is cut short"}
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ = strconv.Unquote(name)
		return &JSONError{Reason: JSONUnknownField, Field: name,
			Message: fmt.Sprintf("unknown field %q; %s fields are %s", name, what, strings.Join(fields, ", "))}
	}
	return &JSONError{Reason: JSONSyntax, Message: strings.TrimPrefix(err.Error(), "json: ")}
}

func jsonKind(goType string) string {
	switch {
	case strings.HasPrefix(goType, "map["):
		return "an object of strings"
	case strings.Contains(goType, "int"):
		return "a whole number"
	case strings.Contains(goType, "string"):
		return "a string"
	case strings.Contains(goType, "HealthParams"):
		return `an object {"log_period": minutes, "action": "restart"|"delete", "sub_actions": ["notify"]}`
	case strings.Contains(goType, "bool"):
		return "true or false"
	case strings.HasPrefix(goType, "[]string"):
		return "a list of strings"
	}
	return goType
}

func position(data []byte, offset int64) (line, col int) {
	line, col = 1, 1
	for i := int64(0); i < offset && i < int64(len(data)); i++ {
		if data[i] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}
