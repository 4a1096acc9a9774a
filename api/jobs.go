package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/cluster"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/jobview"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// submitted answers POST /jobs, /jobs/restart and /notebooks.
type submitted struct {
	JobName       string   `json:"job_name"`
	Status        string   `json:"status"`
	Name          string   `json:"name,omitempty"` // notebooks: the server's name (= job_name)
	RestartedFrom string   `json:"restarted_from,omitempty"`
	Notes         []string `json:"notes,omitempty"`
	// Warnings name what the request asked that trainq does not do
	// (deprecated fields, settings it has no counterpart for).
	Warnings []string `json:"warnings,omitempty"`
}

// postJob runs a job: POST /public/v2/jobs with a RunJobRequest.
func (s *Server) postJob(w http.ResponseWriter, r *http.Request, p Principal) {
	body, err := s.readJSONBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d, err := protocol.DecodeRunJob(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	spec, notes := d.Spec, d.Notes
	if strings.TrimSpace(spec.BaseImage) == "" {
		s.fail(w, r, &protocol.FieldError{Field: "base_image", Message: "is required, for example cr.ai.cloud.ru/aicloud-base-images/py3.10-torch2.1.2:0.0.40"})
		return
	}
	spec.Kind = scheduler.KindJob
	s.create(w, r, p, spec, spec, notes, submitted{}, d.LogsDir)
}

// idempotencyKeyMax bounds the Idempotency-Key header.
const idempotencyKeyMax = 255

// idempotencyNamespace is the UUID v5 namespace of idempotent job names.
var idempotencyNamespace = uuid.MustParse("3d0f6c8e-6a55-4d1c-9a43-2f1c7e5b9b10")

// idempotentName derives the job name of (workspace, key): retries of one
// request land on one workflow ID, and workspaces cannot collide.
func idempotentName(kind scheduler.Kind, workspace, key string) string {
	id := uuid.NewSHA1(idempotencyNamespace, []byte(workspace+"\x00"+key)).String()
	if kind == scheduler.KindNotebook {
		return protocol.NotebookNamePrefix + id
	}
	return protocol.JobNamePrefix + id
}

// requestHash identifies a request, so that a retry can be told from another
// request under the same key. Hashed once the config has filled in its
// defaults, it matches a retry with other spelling of the same request (a
// default left out); hashed as sent, one after a config reload changed the
// defaults (another queue's default class), and one that reached the other
// API replica in the middle of a reload. A retry matches on either.
func requestHash(endpoint string, spec protocol.JobSpec) string {
	b, _ := json.Marshal(spec) // map keys are sorted
	h := sha256.Sum256(append([]byte(endpoint+"\n"), b...))
	return hex.EncodeToString(h[:])
}

// create validates spec, starts its workflow and answers. With an
// Idempotency-Key, the job name comes from the key: a retry answers with the
// same job, a different request under the same key gets 409 (sent is the
// request as sent, before any config default: see requestHash). Everything is
// checked before the first Temporal call, so a rejected request starts
// nothing: the values, the directories (inside the workspace's directory),
// the command line (within the OS's limits) and the size (within
// Temporal's).
func (s *Server) create(w http.ResponseWriter, r *http.Request, p Principal, spec, sent protocol.JobSpec, notes []string, answer submitted, logsDir string) {
	for _, js := range []*protocol.JobSpec{&spec, &sent} {
		if js.Author == "" {
			js.Author = p.User
		}
		if js.Workspace == "" {
			js.Workspace = p.Workspace
		}
	}
	endpoint := r.Pattern + " " + answer.RestartedFrom
	sentHash := requestHash(endpoint, sent)
	checked, more, err := client.CheckSpec(s.config(), spec)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	notes = append(notes, more...)
	root := s.workspaceDir(checked.Workspace)
	if checked.CheckpointDir, err = protocol.ConfineDir("checkpoint_dir", root, checked.CheckpointDir); err == nil {
		if _, err = protocol.ConfineDir("logs_dir", root, logsDir); err == nil {
			err = s.noSymlinkOut(root, map[string]string{"checkpoint_dir": checked.CheckpointDir})
		}
	}
	if err == nil {
		err = checked.CheckLimits()
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if dry, err := dryRunParam(r); err != nil {
		s.fail(w, r, err)
		return
	} else if dry {
		s.dryRun(w, r, p, checked, notes)
		return
	}
	var opts client.SubmitOptions
	key := r.Header.Get("Idempotency-Key")
	if key != "" {
		if len(key) > idempotencyKeyMax || strings.IndexFunc(key, func(c rune) bool { return c < 0x21 || c > 0x7e }) >= 0 {
			s.fail(w, r, errorf(http.StatusBadRequest, codeInvalidParam, "Idempotency-Key",
				fmt.Sprintf("must be 1 to %d visible ASCII characters (a UUID is a good key)", idempotencyKeyMax)))
			return
		}
		opts.Name = idempotentName(checked.Kind, checked.Workspace, key)
		opts.RequestHash, opts.SentHash = requestHash(endpoint, checked.JobSpec), sentHash
	}
	ctx, cancel := s.call(r)
	defer cancel()
	sub, err := s.backend.SubmitChecked(ctx, checked, opts)
	if errors.Is(err, client.ErrJobExists) && key != "" {
		err = nil // a retry after the job ended: compared below
		sub.JobName = opts.Name
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	answer.JobName, answer.Status, answer.Notes, answer.Warnings = sub.JobName, sub.Status, notes, checked.Warnings
	if key != "" {
		info, err := s.backend.Describe(ctx, opts.Name)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		same := info.RequestHash == opts.RequestHash || info.SentHash != "" && info.SentHash == opts.SentHash
		if !same || info.Workspace != checked.Workspace {
			s.fail(w, r, errorf(http.StatusConflict, codeConflict, "Idempotency-Key",
				"this Idempotency-Key was already used for a different request (job "+opts.Name+"); use a new key for a new job"))
			return
		}
		answer.Status = info.Status
	}
	if answer.Status == "" {
		answer.Status = string(protocol.StatePending)
	}
	if checked.Kind == scheduler.KindNotebook {
		answer.Name = answer.JobName
	}
	writeJSON(w, http.StatusOK, answer)
}

// expectedStartParam reads ?expected_start=true|false (absent: false).
func expectedStartParam(q url.Values) (bool, error) {
	switch v := q.Get("expected_start"); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, errorf(http.StatusBadRequest, codeInvalidParam, "expected_start", fmt.Sprintf("%q is not true or false", v))
	}
}

// dryRunParam reads ?dry_run=true|false (absent: false).
func dryRunParam(r *http.Request) (bool, error) {
	switch v := r.URL.Query().Get("dry_run"); v {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	default:
		return false, errorf(http.StatusBadRequest, codeInvalidParam, "dry_run", fmt.Sprintf("%q is not true or false", v))
	}
}

// dryRunAnswer is POST /jobs?dry_run=true's answer: what the checked job
// would get if it were submitted now. Nothing was started.
type dryRunAnswer struct {
	DryRun     bool   `json:"dry_run"`
	Region     string `json:"region"`
	Allocation string `json:"allocation"`
	// WouldStart: it would start at the allocator's next pass, on Placement.
	WouldStart bool                `json:"would_start"`
	Placement  []jobview.Placement `json:"placement,omitempty"`
	// Preempts are the running jobs it would preempt, and wait for.
	Preempts []string `json:"preempts,omitempty"`
	// Position and Reason say where it would wait and why, when it would
	// not start at once.
	Position int    `json:"position,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// ExpectedStartAt and ExpectedStart, when it would not start at once:
	// when it would be expected to (absent: unknown) and the assumption, or
	// why it is unknown.
	ExpectedStartAt *time.Time `json:"expected_start_at,omitempty"`
	ExpectedStart   string     `json:"expected_start,omitempty"`
	// ExpectedStartEarliest and ExpectedStartLatest: the range it will
	// likely start in (8 in 10 jobs do), once the allocation can say it.
	ExpectedStartEarliest *time.Time `json:"expected_start_earliest,omitempty"`
	ExpectedStartLatest   *time.Time `json:"expected_start_latest,omitempty"`
	Notes                 []string   `json:"notes,omitempty"`
	Warnings              []string   `json:"warnings,omitempty"`
}

// dryRun asks the allocator what the checked job would get, and answers
// without starting anything (as sbatch --test-only does).
func (s *Server) dryRun(w http.ResponseWriter, r *http.Request, p Principal, checked protocol.CheckedSpec, notes []string) {
	ctx, cancel := s.call(r)
	defer cancel()
	d, err := s.backend.DryRun(ctx, checked)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := dryRunAnswer{DryRun: true, Region: d.Region, Allocation: d.Allocation, WouldStart: d.Start, Placement: jobview.PlacementOf(d.Placement),
		Preempts: d.Preempts, Notes: notes, Warnings: checked.Warnings}
	if d.Waiting != nil {
		out.Position, out.Reason = d.Waiting.Position, d.Waiting.Reason
	}
	if e := d.ExpectedStart; e != nil {
		out.ExpectedStartAt, out.ExpectedStart = expectedAt(e), expectedText(e)
		out.ExpectedStartEarliest, out.ExpectedStartLatest = expectedRange(e)
	}
	if d.Idle {
		out.Notes = append(out.Notes, "the allocation has no allocator yet: this is the answer of the empty allocation")
	}
	rd := s.redactor(p) // victims, and the jobs the reason names, are named only to their own workspace
	learn := out.Preempts
	if d.Waiting != nil {
		learn = append(slices.Clone(learn), d.Waiting.WaitingFor...)
	}
	if err := rd.learn(ctx, learn); err != nil {
		s.fail(w, r, err)
		return
	}
	out.Preempts = rd.names(out.Preempts)
	if err := rd.apply(ctx, &out); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// workspaceDir is the directory inside which a workspace's jobs keep their
// checkpoint_dir and logs_dir: <workspaces_dir>/<workspace>.
func (s *Server) workspaceDir(ws string) string {
	if ws == "" {
		ws = "_" // jobs of no workspace (the CLI's)
	}
	return filepath.Join(s.workspacesDir, ws)
}

// noSymlinkOut checks that the part of each directory that exists already
// does not lead out of root through a symbolic link. The worker creates the
// rest; a link made after this check is not seen.
func (s *Server) noSymlinkOut(root string, dirs map[string]string) error {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil // the workspace's directory does not exist yet: nothing inside can be a link
	}
	for _, field := range slices.Sorted(maps.Keys(dirs)) {
		dir := dirs[field]
		for p := dir; strings.HasPrefix(p, root); p = filepath.Dir(p) {
			resolved, err := filepath.EvalSymlinks(p)
			if err != nil {
				continue // does not exist (yet): look at its parent
			}
			if resolved != realRoot && !strings.HasPrefix(resolved, realRoot+string(filepath.Separator)) {
				return &protocol.FieldError{Field: field, Message: fmt.Sprintf("%q leads outside your workspace's directory %s through a symbolic link", dir, root)}
			}
			break
		}
	}
	return nil
}

// visibleJob finds a job the principal may see. Any other job, and any name
// that is not a job, is 404 alike, and takes alike: every not-found answer
// waits until NotFoundFloor after the lookup began, so the time of a 404
// does not tell a job of another workspace from a name nobody has.
func (s *Server) visibleJob(ctx context.Context, p Principal, name string) (client.JobInfo, error) {
	start := time.Now()
	info, err := s.lookupJob(ctx, p, name)
	if errors.Is(err, client.ErrJobNotFound) {
		s.padNotFound(ctx, start)
	}
	return info, err
}

func (s *Server) lookupJob(ctx context.Context, p Principal, name string) (client.JobInfo, error) {
	if cluster.ValidJobName(name) != nil {
		return client.JobInfo{}, client.ErrJobNotFound
	}
	info, err := s.backend.Describe(ctx, name)
	if err != nil {
		return client.JobInfo{}, err
	}
	if !p.CanSee(info.Workspace) {
		return client.JobInfo{}, client.ErrJobNotFound
	}
	return info, nil
}

// padNotFound waits until NotFoundFloor has passed since start.
func (s *Server) padNotFound(ctx context.Context, start time.Time) {
	s.waitUntil(ctx, start.Add(s.opts.NotFoundFloor))
}

// waitUntil returns once deadline has passed or ctx is done.
func waitUntil(ctx context.Context, deadline time.Time) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// visibleStatus is the status of a job the principal may see.
func (s *Server) visibleStatus(ctx context.Context, p Principal, name string) (client.JobInfo, protocol.JobStatus, error) {
	info, err := s.visibleJob(ctx, p, name)
	if err != nil {
		return info, protocol.JobStatus{}, err
	}
	st, err := s.backend.Status(ctx, name)
	return info, st, err
}

// preemptorView is one entry of /preemptors, in ML Space's words.
type preemptorView struct {
	ID       string     `json:"id"`
	Name     string     `json:"name"`
	Priority string     `json:"priority"`
	Type     string     `json:"type"` // job or notebook
	Attempt  int        `json:"attempt,omitempty"`
	At       *time.Time `json:"preempted_at,omitempty"`
}

// jobView answers GET /jobs/{job_name}: ML Space's status fields plus
// trainq's class, attempt, place in the queue, reason and preemptors.
type jobView struct {
	JobName        string     `json:"job_name"`
	Status         string     `json:"status"`
	CreatedAt      time.Time  `json:"created_at"`
	PendingAt      *time.Time `json:"pending_at,omitempty"`
	RunningAt      *time.Time `json:"running_at,omitempty"`
	CompletedAt    *time.Time `json:"completed_at,omitempty"`
	Kind           string     `json:"kind"`
	Type           string     `json:"type"`
	PriorityClass  string     `json:"priority_class"`
	Region         string     `json:"region"`
	AllocationName string     `json:"allocation_name"`
	QueueName      string     `json:"queue_name,omitempty"`
	InstanceType   string     `json:"instance_type"`
	NWorkers       int        `json:"n_workers"`
	GPUCount       int        `json:"gpu_count"`
	MaxRetry       int        `json:"max_retry"`
	Attempt        int        `json:"attempt"`
	Restarts       int        `json:"restarts"`
	JobAuthor      string     `json:"job_author,omitempty"`
	Workspace      string     `json:"workspace,omitempty"`
	JobDesc        string     `json:"job_desc,omitempty"`
	Message        string     `json:"message,omitempty"`
	// Warning says the running job is about to be stopped, and why (an
	// idle Jupyter server, its shutdown_in or shutdown_at).
	Warning    string            `json:"warning,omitempty"`
	URL        string            `json:"url,omitempty"`
	Position   int               `json:"position,omitempty"`
	Reason     string            `json:"reason,omitempty"`
	WaitingFor []string          `json:"waiting_for,omitempty"`
	Preemptor  *preemptorView    `json:"preemptor,omitempty"`
	Preemptors []preemptorView   `json:"preemptors"`
	Attempts   []jobview.Attempt `json:"attempts"`
	Warnings   []string          `json:"warnings,omitempty"`
	// ExpectedStartAt and ExpectedStart, for a pending job with
	// ?expected_start=true: when it is expected to start (absent: unknown)
	// and the assumption, or why it is unknown.
	ExpectedStartAt *time.Time `json:"expected_start_at,omitempty"`
	ExpectedStart   string     `json:"expected_start,omitempty"`
	// ExpectedStartEarliest and ExpectedStartLatest: the range it will
	// likely start in (8 in 10 jobs do), once the allocation can say it.
	ExpectedStartEarliest *time.Time `json:"expected_start_earliest,omitempty"`
	ExpectedStartLatest   *time.Time `json:"expected_start_latest,omitempty"`
	// StopTimer is ML Space's stop_timer in minutes (0: none).
	StopTimer int `json:"stop_timer,omitempty"`
	// RuntimeEstimateSeconds and RuntimeEstimate, for a job without a
	// stop_timer: how long it is expected to run, learned from the
	// completed jobs like it, and from which (absent: too few completed).
	RuntimeEstimateSeconds int64  `json:"runtime_estimate_seconds,omitempty"`
	RuntimeEstimate        string `json:"runtime_estimate,omitempty"`
}

// referenced lists the job names a status mentions in fields of their own.
func referenced(st protocol.JobStatus) []string {
	names := append([]string(nil), st.WaitingFor...)
	for _, pr := range st.Preemptors {
		names = append(names, pr.Job)
	}
	for _, a := range st.Attempts {
		if a.Preemptor != nil {
			names = append(names, a.Preemptor.Job)
		}
	}
	return names
}

// preemptorList lists who took the job's capacity, attempt by attempt.
func preemptorList(st protocol.JobStatus, rd *redactor) []preemptorView {
	out := []preemptorView{}
	seen := map[string]bool{}
	view := func(pr scheduler.Preemptor) preemptorView {
		name := rd.name(pr.Job)
		id := name
		if name == hiddenName {
			id = ""
		}
		kind := string(pr.Kind)
		if kind == "" {
			kind = string(scheduler.KindJob)
		}
		return preemptorView{ID: id, Name: name, Priority: pr.Class.String(), Type: kind}
	}
	for _, a := range st.Attempts {
		if a.Preemptor == nil {
			continue
		}
		v := view(*a.Preemptor)
		v.Attempt, v.At = a.Number, a.EndedAt
		seen[a.Preemptor.Job] = true
		out = append(out, v)
	}
	for _, pr := range st.Preemptors {
		if !seen[pr.Job] {
			seen[pr.Job] = true
			out = append(out, view(pr))
		}
	}
	return out
}

// hidePreemptors shows attempts with the preemptors rd hides hidden.
func hidePreemptors(attempts []protocol.AttemptRecord, rd *redactor) []jobview.Attempt {
	out := jobview.AttemptsOf(attempts)
	if out == nil {
		out = []jobview.Attempt{} // a job without attempts lists none
	}
	for i := range out {
		if pr := out[i].Preemptor; pr != nil && !rd.shows(pr.Job) {
			pr.Job = hiddenName
		}
	}
	return out
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request, p Principal) {
	ml, err := shapeParams(r, "region", "expected_start")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	wantStart, err := expectedStartParam(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.call(r)
	defer cancel()
	info, st, err := s.visibleStatus(ctx, p, r.PathValue("job_name"))
	if err == nil {
		err = checkRegion(r, info, st)
	}
	if ml && errors.Is(err, client.ErrJobNotFound) {
		jobNotFoundMLSpace(w, r.PathValue("job_name"))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rd := s.redactor(p)
	rd.know(st.JobName)
	if err := rd.learn(ctx, referenced(st)); err != nil {
		s.fail(w, r, err)
		return
	}
	v := jobView{
		JobName: st.JobName, Status: string(st.State), CreatedAt: st.CreatedAt, PendingAt: st.PendingAt,
		RunningAt: st.RunningAt, CompletedAt: st.CompletedAt, Kind: string(st.Kind), Type: st.Spec.Type,
		PriorityClass: st.Priority, Region: st.Region, AllocationName: st.Allocation, QueueName: st.Spec.QueueName, InstanceType: st.InstanceType,
		NWorkers: st.NWorkers, GPUCount: st.GPUs, MaxRetry: st.MaxRetry, Attempt: st.Attempt, Restarts: st.Restarts,
		JobAuthor: st.Spec.Author, Workspace: info.Workspace, JobDesc: st.Spec.JobDesc,
		Message: st.Message, Warning: st.Warning, URL: st.URL(), Position: st.Position, Reason: st.Reason,
		StopTimer:  int(st.Spec.TimeLimit / time.Minute),
		WaitingFor: rd.names(st.WaitingFor), Preemptors: preemptorList(st, rd), Attempts: hidePreemptors(st.Attempts, rd),
		Warnings: st.Spec.Warnings,
	}
	if e := st.Estimate; e != nil {
		v.RuntimeEstimateSeconds, v.RuntimeEstimate = int64(e.Runtime/time.Second), e.String()
	}
	if n := len(v.Preemptors); n > 0 {
		last := v.Preemptors[n-1]
		v.Preemptor = &last
	}
	if author := cmp.Or(st.Spec.Author, info.Author); !p.Admin() && p.User != author {
		// A Jupyter server's token lets whoever holds it run code as its
		// author: the workspace sees where it serves, not the token.
		v.URL = withoutToken(v.URL)
		for i := range v.Attempts {
			v.Attempts[i].URL = withoutToken(v.Attempts[i].URL)
		}
	}
	if wantStart && st.State == protocol.StatePending {
		e, err := s.backend.ExpectedStart(ctx, st.Region, st.Allocation, st.JobName)
		if err != nil {
			e = &scheduler.ExpectedStart{Because: "unknown: the allocator did not answer: " + err.Error()}
		}
		v.ExpectedStartAt, v.ExpectedStart = expectedAt(e), expectedText(e)
		v.ExpectedStartEarliest, v.ExpectedStartLatest = expectedRange(e)
	}
	if ml {
		out := mlspaceJobOf(info.RunID, &v)
		s.writeRedacted(ctx, w, r, rd, &out)
		return
	}
	s.writeRedacted(ctx, w, r, rd, &v)
}

// writeRedacted answers v (a pointer) after hiding, in every string of it,
// the job names rd hides (see redactor).
func (s *Server) writeRedacted(ctx context.Context, w http.ResponseWriter, r *http.Request, rd *redactor, v any) {
	if err := rd.apply(ctx, v); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// preemptorsView answers GET /jobs/{job_name}/preemptors.
type preemptorsView struct {
	JobName    string          `json:"job_name"`
	Status     string          `json:"status"`
	Preemptors []preemptorView `json:"preemptors"`
}

func (s *Server) preemptors(w http.ResponseWriter, r *http.Request, p Principal) {
	ctx, cancel := s.call(r)
	defer cancel()
	_, st, err := s.visibleStatus(ctx, p, r.PathValue("job_name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rd := s.redactor(p)
	rd.know(st.JobName)
	if err := rd.learn(ctx, referenced(st)); err != nil {
		s.fail(w, r, err)
		return
	}
	s.writeRedacted(ctx, w, r, rd, &preemptorsView{JobName: st.JobName, Status: string(st.State), Preemptors: preemptorList(st, rd)})
}

// deleteJob stops a job. Stopping a stopped or finished job is a no-op.
func (s *Server) deleteJob(w http.ResponseWriter, r *http.Request, p Principal) {
	s.stop(w, r, p, r.PathValue("job_name"), "")
}

func (s *Server) deleteNotebook(w http.ResponseWriter, r *http.Request, p Principal) {
	s.stop(w, r, p, r.PathValue("name"), scheduler.KindNotebook)
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request, p Principal, name string, kind scheduler.Kind) {
	ml, err := shapeParams(r, "region")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.call(r)
	defer cancel()
	start := time.Now()
	info, err := s.visibleJob(ctx, p, name)
	if err == nil && kind != "" && info.Kind != string(kind) {
		err = client.ErrJobNotFound
		s.padNotFound(ctx, start)
	}
	if err == nil && r.URL.Query().Get("region") != "" {
		var st protocol.JobStatus
		if st, err = s.backend.Status(ctx, name); err == nil {
			err = checkRegion(r, info, st)
		}
	}
	if err == nil {
		err = s.backend.Cancel(ctx, name)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := info.Status
	if !protocol.JobState(status).Terminal() {
		status = string(protocol.StateStopping)
	}
	out := map[string]string{"job_name": name, "status": status}
	if ml {
		out["status"] = "deleted" // ML Space's word; the job stays visible with a terminal status
	}
	if kind == scheduler.KindNotebook {
		out["name"] = name
	}
	writeJSON(w, http.StatusOK, out)
}

// restartJob starts a new job with the parameters of job_name.
func (s *Server) restartJob(w http.ResponseWriter, r *http.Request, p Principal) {
	body, err := s.readJSONBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req struct {
		JobName string `json:"job_name"`
	}
	if err := protocol.DecodeStrictJSON(body, &req, []string{"job_name"}, "restart request"); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.JobName == "" {
		s.fail(w, r, &protocol.FieldError{Field: "job_name", Message: "is required: the job to run again"})
		return
	}
	ctx, cancel := s.call(r)
	info, st, err := s.visibleStatus(ctx, p, req.JobName)
	cancel()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	spec := st.Spec
	spec.Author = p.User
	spec.Workspace = info.Workspace
	s.create(w, r, p, spec, spec, nil, submitted{RestartedFrom: req.JobName}, "")
}

// Notebooks.

func (s *Server) postNotebook(w http.ResponseWriter, r *http.Request, p Principal) {
	body, err := s.readJSONBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req client.NotebookRequest
	if err := protocol.DecodeStrictJSON(body, &req, client.NotebookFields, "notebook request"); err != nil {
		s.fail(w, r, err)
		return
	}
	spec := client.NotebookSpec(s.config(), req)
	if err := protocol.CheckStrings(spec); err != nil {
		s.fail(w, r, err)
		return
	}
	s.create(w, r, p, spec, client.NotebookSpec(nil, req), nil, submitted{}, "")
}

// Listing.

// jobRow is one job of GET /jobs, in ML Space's list words.
type jobRow struct {
	UID            string     `json:"uid"`
	JobName        string     `json:"job_name"`
	Status         string     `json:"status"`
	Region         string     `json:"region"`
	AllocationName string     `json:"allocation_name"`
	InstanceType   string     `json:"instance_type,omitempty"`
	JobDesc        string     `json:"job_desc,omitempty"`
	JobAuthor      string     `json:"job_author,omitempty"`
	Workspace      string     `json:"workspace,omitempty"`
	Kind           string     `json:"kind"`
	PriorityClass  string     `json:"priority_class"`
	QueueName      string     `json:"queue_name"`
	QueueID        string     `json:"queue_id"`
	GPUCount       int64      `json:"gpu_count"`
	Attempt        int64      `json:"attempt"`
	CreatedDT      time.Time  `json:"created_dt"`
	CompletedDT    *time.Time `json:"completed_dt,omitempty"`
	Duration       int64      `json:"duration"` // seconds, until now for jobs still open
}

const (
	listLimitDefault = 100
	listLimitMax     = 1000
	listWindowMax    = 10000 // offset+limit
)

var listParams = map[string]bool{"region": true, "allocation_name": true, "status": true, "job_author": true,
	"start_date": true, "end_date": true, "offset": true, "limit": true, "workspace": true}

// listFilter reads GET /jobs's query.
func (s *Server) listFilter(q url.Values, p Principal) (client.ListFilter, error) {
	var f client.ListFilter
	var keys []string
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !listParams[k] {
			return f, errorf(http.StatusBadRequest, codeInvalidParam, k, fmt.Sprintf("unknown query parameter %q; allowed: region, allocation_name, status, job_author, start_date, end_date, offset, limit, workspace", k))
		}
	}
	name := func(param string, dst *string) error {
		v := q.Get(param)
		if v != "" && !protocol.ValidUserName(v) {
			return errorf(http.StatusUnprocessableEntity, codeInvalidParam, param, fmt.Sprintf("%q is not a valid name (letters, digits, '-', '_', '.', '@')", v))
		}
		*dst = v
		return nil
	}
	for param, dst := range map[string]*string{"region": &f.Region, "allocation_name": &f.Allocation, "job_author": &f.Author, "workspace": &f.Workspace} {
		if err := name(param, dst); err != nil {
			return f, err
		}
	}
	if !p.Admin() {
		if f.Workspace != "" && f.Workspace != p.Workspace {
			return f, errorf(http.StatusUnprocessableEntity, codeInvalidParam, "workspace", "you can list only your workspace, "+p.Workspace)
		}
		f.Workspace = p.Workspace
	}
	for _, v := range q["status"] {
		for _, st := range strings.Split(v, ",") {
			js, err := protocol.ParseJobState(strings.TrimSpace(st))
			if err != nil {
				return f, errorf(http.StatusUnprocessableEntity, codeInvalidParam, "status", err.Error())
			}
			f.States = append(f.States, string(js))
		}
	}
	for param, dst := range map[string]*time.Time{"start_date": &f.Since, "end_date": &f.Until} {
		if v := q.Get(param); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return f, errorf(http.StatusUnprocessableEntity, codeInvalidParam, param, fmt.Sprintf("%q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", v))
			}
			*dst = t
		}
	}
	num := func(param string, def, lo, hi int) (int, error) {
		v := q.Get(param)
		if v == "" {
			return def, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return 0, errorf(http.StatusUnprocessableEntity, codeInvalidParam, param, fmt.Sprintf("%q is not allowed; use a whole number from %d to %d", v, lo, hi))
		}
		return n, nil
	}
	var err error
	if f.Offset, err = num("offset", 0, 0, listWindowMax); err != nil {
		return f, err
	}
	if f.Limit, err = num("limit", listLimitDefault, 1, listLimitMax); err != nil {
		return f, err
	}
	if f.Offset+f.Limit > listWindowMax {
		return f, errorf(http.StatusUnprocessableEntity, codeInvalidParam, "offset", fmt.Sprintf("offset+limit must not exceed %d; narrow the list with filters", listWindowMax))
	}
	return f, nil
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request, p Principal) {
	f, err := s.listFilter(r.URL.Query(), p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.call(r)
	defer cancel()
	count, err := s.backend.Count(ctx, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jobs, err := s.backend.List(ctx, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rows := []jobRow{}
	rd := s.redactor(p)
	now := time.Now()
	for _, j := range jobs {
		end := now
		if j.ClosedAt != nil {
			end = *j.ClosedAt
		}
		queue := j.Queue
		if queue == "" {
			queue = config.DefaultQueueName // submitted before queues
			if _, a, err := s.config().Allocation(j.Region, j.Allocation); err == nil {
				queue = a.DefaultQueue().Name
			}
		}
		rows = append(rows, jobRow{UID: j.RunID, JobName: j.JobName, Status: j.Status, Region: j.Region, AllocationName: j.Allocation,
			QueueName: queue, QueueID: j.Allocation + ":" + queue,
			InstanceType: j.InstanceType, JobDesc: j.JobDesc, JobAuthor: j.Author, Workspace: j.Workspace, Kind: j.Kind,
			PriorityClass: j.Priority, GPUCount: j.GPUs, Attempt: j.Attempt, CreatedDT: j.CreatedAt, CompletedDT: j.ClosedAt,
			Duration: int64(end.Sub(j.CreatedAt).Seconds())})
		rd.know(j.JobName) // listed within the workspace
	}
	s.writeRedacted(ctx, w, r, rd, &listView{Count: count, Offset: f.Offset, Limit: f.Limit, Jobs: rows})
}

// listView answers GET /jobs.
type listView struct {
	Count  int64    `json:"count"`
	Offset int      `json:"offset"`
	Limit  int      `json:"limit"`
	Jobs   []jobRow `json:"jobs"`
}

// withoutToken is a Jupyter server's URL without its token query parameter
// ("" if it does not parse: better nothing than the token).
func withoutToken(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	q := u.Query()
	if !q.Has("token") {
		return raw
	}
	q.Del("token")
	u.RawQuery = q.Encode()
	return u.String()
}
