package protocol

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/scheduler"
)

// Limits of a job request. Each guards against a job that is accepted but
// can never start or never finish: the OS refuses its command line, Temporal
// refuses its parameters, or its history outgrows what Temporal keeps.
const (
	// MaxNWorkers caps n_workers (the allocation's nodes cap it further).
	MaxNWorkers = 1024
	// MaxProcessesPerWorker caps processes_per_worker; an instance type that
	// names its CPU cores caps it at max(GPUs, cores) (see CheckLimits).
	MaxProcessesPerWorker = 256

	// MaxCommandLineBytes is the longest single argument Linux accepts
	// (MAX_ARG_STRLEN, 128 KiB, with its terminating NUL). A worker runs
	// `/bin/sh -c '<command line>'`, so the script with its flags is one
	// argument.
	MaxCommandLineBytes = 128<<10 - 1
	// MaxExecBytes bounds what a job adds to a worker's exec: the command
	// line, env_variables and trainq's variables, strings and pointers, as
	// execve counts them. Linux allows a quarter of the stack limit
	// (usually 2 MiB) for arguments and the whole environment; the other
	// half is left for the environment trainq-worker itself runs with.
	MaxExecBytes = 1 << 20

	// MaxEncodedSpecBytes bounds a job's parameters as Temporal stores them
	// (the JSON of the workflow input, where "<" takes 6 bytes). Temporal
	// refuses a payload over 2 MiB by default; the rest of the start request
	// (memo, search attributes, details) needs room too.
	MaxEncodedSpecBytes = 1536 << 10
	// MaxHistoryBytes bounds the workflow history one run of a job may
	// write from its parameters: every start of a worker records the
	// worker's script, env_variables and flags once, and an attempt starts
	// n_workers workers. Between attempts a job continues as new once
	// Temporal suggests it (past continueAsNewBytes), so one run holds what
	// came before that point and one more attempt. Temporal terminates a
	// workflow whose history passes 50 MiB by default.
	MaxHistoryBytes = 32 << 20

	// MaxPathBytes and MaxPathElemBytes are Linux's PATH_MAX (less the NUL)
	// and NAME_MAX: checkpoint_dir and logs_dir must fit them.
	MaxPathBytes     = 4095
	MaxPathElemBytes = 255
)

// pythonReserve is room for `exec <python> ` in front of a Python job's
// script: the interpreter is the node agent's setting (python3 by default).
const pythonReserve = 256

// workerEnvReserve is room for the variables trainq gives every worker
// (RANK, MASTER_ADDR, TRAINQ_JOB_NAME, ...) besides TRAINQ_CHECKPOINT_DIR.
const workerEnvReserve = 2048

// CheckLimits checks what needs the whole request: processes_per_worker
// against the instance type, the worker's command line and exec size against
// the OS's limits, and the encoded size against Temporal's. It does not
// change spec; a missing n_workers or type counts as its default. A request
// too large to keep is a *FieldError with TooLarge set naming its largest
// field; anything else that cannot start is a *FieldError naming the field.
//
// The edge (the REST API, the CLI's file decoding) calls it; the workflow
// does not, so a limit can change without touching running jobs.
func CheckLimits(s JobSpec) error { return checkLimits(s, nil) }

// checkLimits is CheckLimits with the instance type parsed (nil: parse it
// here; a bad one is reported by Normalize).
func checkLimits(s JobSpec, demand *scheduler.Demand) error {
	nWorkers := max(s.NWorkers, 1)
	if nWorkers > MaxNWorkers {
		return fieldErr("n_workers", "must be between 1 and %d, got %d", MaxNWorkers, s.NWorkers)
	}
	if demand == nil {
		if d, err := scheduler.ParseInstanceType(s.InstanceType); err == nil {
			demand = &d
		}
	}
	if err := checkProcesses(s, demand); err != nil {
		return err
	}
	for _, d := range []struct{ field, dir string }{{"checkpoint_dir", s.CheckpointDir}} {
		if err := CheckPath(d.field, d.dir); err != nil {
			return err
		}
	}
	if err := checkExec(s); err != nil {
		return err
	}
	return checkEncoded(s)
}

// checkProcesses: at most MaxProcessesPerWorker, and at most the GPUs or
// cores (whichever is more) of an instance type that names its cores.
func checkProcesses(s JobSpec, d *scheduler.Demand) error {
	n := s.ProcessesPerWorker
	if n < 0 {
		return fieldErr("processes_per_worker", "must be a positive number or \"default\", got %d", n)
	}
	if n > MaxProcessesPerWorker {
		return fieldErr("processes_per_worker", "%d is too many; at most %d processes per worker are allowed", n, MaxProcessesPerWorker)
	}
	if d == nil || d.CPU == 0 {
		return nil // a bad instance type is reported by Normalize
	}
	if limit := max(d.CPU, d.GPUs); n > limit {
		what := "CPU cores"
		if d.GPUs > d.CPU {
			what = "GPUs"
		}
		return fieldErr("processes_per_worker", "%d is more than instance type %s can run: at most %d, its %s", n, s.InstanceType, limit, what)
	}
	return nil
}

// CheckPath checks that p can be a directory path on Linux: at most
// MaxPathBytes, elements of at most MaxPathElemBytes, no NUL.
func CheckPath(field, p string) error {
	if len(p) > MaxPathBytes {
		return fieldErr(field, "is %d bytes; a path may have at most %d", len(p), MaxPathBytes)
	}
	if strings.ContainsRune(p, 0) {
		return fieldErr(field, "must not contain NUL characters")
	}
	for _, e := range strings.Split(p, "/") {
		if len(e) > MaxPathElemBytes {
			return fieldErr(field, "has a path element of %d bytes; at most %d are allowed", len(e), MaxPathElemBytes)
		}
	}
	return nil
}

// shellQuotedMax is the most bytes s can take once shell-quoted as the
// node agent quotes flags ('...' with each ' as '\”).
func shellQuotedMax(s string) int { return len(s) + 2 + 3*strings.Count(s, "'") }

// CommandLineBytes is an upper bound of the worker's shell command line:
// [exec <python> ]<script> '--k=v' ...
func CommandLineBytes(s JobSpec) int {
	n := len(s.Script)
	if cluster.IsPythonType(s.Type) {
		n += pythonReserve
	}
	for k, v := range s.Flags {
		n += 1 + shellQuotedMax("--"+k+"="+v)
	}
	return n
}

// checkExec checks the worker's exec against the OS: the command line is
// one argument, at most MaxCommandLineBytes; the command line, the
// variables and their pointers at most MaxExecBytes.
func checkExec(s JobSpec) error {
	line := CommandLineBytes(s)
	if line > MaxCommandLineBytes {
		field := "script"
		if flagBytes := CommandLineBytes(JobSpec{Flags: s.Flags}); flagBytes > len(s.Script) {
			field = "flags"
		}
		return fieldErr(field, "makes the worker's command line (script and flags, shell-quoted) about %d bytes; Linux accepts at most %d bytes in one argument, so the job could never start. Put long values in a file, or in env_variables",
			line, MaxCommandLineBytes)
	}
	const ptr = 8
	envBytes := 0
	for k, v := range s.EnvVariables {
		envBytes += len(k) + 1 + len(v) + 1 + ptr
	}
	total := len("/bin/sh") + len("-c") + line + 3 + 4*ptr + envBytes +
		len("TRAINQ_CHECKPOINT_DIR=") + len(s.CheckpointDir) + 1 + ptr + workerEnvReserve
	if total > MaxExecBytes {
		field := "env_variables"
		if line > envBytes {
			field = largestOf(map[string]int{"script": len(s.Script), "flags": line - len(s.Script)})
		}
		return fieldErr(field, "makes the worker's command line and environment about %d bytes; at most %d are allowed (Linux refuses to start a process whose arguments and environment are too large)",
			total, MaxExecBytes)
	}
	return nil
}

// encodedLen is the length of v as Temporal's JSON payload converter
// encodes it (encoding/json, with HTML escaping).
func encodedLen(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}

// fieldSizes are the encoded sizes of the fields that can be large.
func fieldSizes(s JobSpec) map[string]int {
	return map[string]int{
		"script": encodedLen(s.Script), "base_image": encodedLen(s.BaseImage), "job_desc": encodedLen(s.JobDesc),
		"checkpoint_dir": encodedLen(s.CheckpointDir), "env_variables": encodedLen(s.EnvVariables),
		"flags": encodedLen(s.Flags), "instance_type": encodedLen(s.InstanceType),
	}
}

// largestOf names the largest entry (ties: the first name in order).
func largestOf(sizes map[string]int) string {
	best, bestN := "", -1
	for _, k := range slices.Sorted(maps.Keys(sizes)) {
		if sizes[k] > bestN {
			best, bestN = k, sizes[k]
		}
	}
	return best
}

// largestEntry names the largest entry of a map field, e.g. env_variables.A.
func largestEntry(field string, m map[string]string) string {
	sizes := map[string]int{}
	for k, v := range m {
		sizes[k] = encodedLen(k) + encodedLen(v)
	}
	if len(sizes) == 0 {
		return field
	}
	return EntryPath(field, largestOf(sizes))
}

// continueAsNewBytes is the history size past which Temporal suggests that
// a workflow continue as new (limit.historySize.suggestContinueAsNew,
// 4 MiB by default).
const continueAsNewBytes = 4 << 20

// placeholderName stands for the job name in the encoded input: job names
// are at most cluster.MaxJobNameLen (200) bytes.
var placeholderName = strings.Repeat("x", 200)

// checkEncoded checks the parameters as Temporal would store them, and the
// history their worker starts could write.
func checkEncoded(s JobSpec) error {
	sizes := fieldSizes(s)
	largest := largestOf(sizes)
	name := largest
	switch largest {
	case "env_variables":
		name = largestEntry(largest, s.EnvVariables)
	case "flags":
		name = largestEntry(largest, s.Flags)
	}
	total := encodedLen(JobInput{Name: placeholderName, Spec: s})
	if total > MaxEncodedSpecBytes {
		return &FieldError{Field: largest, TooLarge: true, Message: fmt.Sprintf(
			"the job's parameters take %d bytes as stored (JSON-escaped: < > & and control characters take 6 bytes each); at most %d are allowed. The largest field is %s (%d bytes; largest entry %s)",
			total, MaxEncodedSpecBytes, largest, sizes[largest], name)}
	}
	// What each worker start records: the worker's part of the spec. One
	// run of the job's workflow holds its input, what came before Temporal
	// suggested continuing as new, and the attempt that was under way.
	perStart := sizes["script"] + sizes["env_variables"] + sizes["flags"] + sizes["base_image"] + sizes["checkpoint_dir"] + 1024
	nWorkers := max(s.NWorkers, 1)
	if history := 2*total + continueAsNewBytes + nWorkers*perStart; history > MaxHistoryBytes {
		worker := largestOf(map[string]int{"script": sizes["script"], "env_variables": sizes["env_variables"], "flags": sizes["flags"]})
		return &FieldError{Field: worker, Message: fmt.Sprintf(
			"each start of a worker records %d bytes of script, env_variables and flags, and an attempt of this job starts %d workers: about %d MiB of workflow history in one run, over the %d MiB allowed. Make %s smaller, or lower n_workers",
			perStart, nWorkers, history>>20, MaxHistoryBytes>>20, worker)}
	}
	return nil
}

// ConfineDir resolves dir, a path a job writes to, inside root (an absolute,
// clean directory): a relative dir is taken relative to root, an absolute
// one must lie inside root. ".." may not lead out of root. The answer is
// absolute and clean; an empty dir stays empty.
func ConfineDir(field, root, dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	if err := CheckPath(field, dir); err != nil {
		return "", err
	}
	abs := dir
	if !path.IsAbs(dir) {
		abs = path.Join(root, dir)
	}
	abs = path.Clean(abs)
	if abs != root && !strings.HasPrefix(abs, strings.TrimSuffix(root, "/")+"/") {
		if path.IsAbs(dir) {
			return "", fieldErr(field, "%q is outside your workspace's directory %s; use a path inside it, or a relative path (taken inside it)", dir, root)
		}
		return "", fieldErr(field, "%q leads outside your workspace's directory %s; use a relative path without '..' steps out of it", dir, root)
	}
	if err := CheckPath(field, abs); err != nil {
		return "", err
	}
	return abs, nil
}
