// Package api is trainq's ML Space-compatible REST API: the paths, fields
// and status words of ML Space's public API v2, plus what trainq explains
// that ML Space does not (why a job waits, who preempted it). Every handler
// talks to Temporal through the trainq client (a client.Jobs) with a timeout; nothing is kept in the
// server, so any number of servers can run side by side.
package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
)

// MaxBodyBytes bounds request bodies; larger ones get 413.
const MaxBodyBytes = 1 << 20

// Defaults of Options.
const (
	DefaultBodyTimeout   = 30 * time.Second
	DefaultNotFoundFloor = 50 * time.Millisecond
)

// Options configure a Server.
type Options struct {
	Config *config.Config
	// Backend is trainq's client: a *client.Client, or a fake in tests.
	Backend client.Jobs
	Tokens  *Tokens
	Logger  *slog.Logger
	// CallTimeout bounds the Temporal calls of one request (default 10s).
	CallTimeout time.Duration
	// PollInterval is how often a followed log checks the job (default 500ms).
	PollInterval time.Duration
	// BodyTimeout bounds reading a request body (default 30s); a body that
	// has not arrived by then is answered 408.
	BodyTimeout time.Duration
	// NotFoundFloor is the least time a 404 for a job name takes (default
	// 50ms), whether the job belongs to another workspace or does not
	// exist, so that timing does not tell the two apart. It should be above
	// the usual time of one Temporal call.
	NotFoundFloor time.Duration
}

// Server serves the API. It is an http.Handler.
type Server struct {
	// live is the config; Reload swaps it while requests run.
	live    atomic.Pointer[config.Config]
	backend client.Jobs
	tokens  *Tokens
	log     *slog.Logger
	opts    Options
	mux     *http.ServeMux
	metrics *metrics
	// workspacesDir (absolute) holds a directory per workspace, inside
	// which checkpoint_dir and logs_dir must lie.
	workspacesDir string
	// waitUntil returns once deadline has passed or ctx is done (padNotFound).
	waitUntil func(ctx context.Context, deadline time.Time)
}

// route is one endpoint. The OpenAPI document lists exactly these.
type route struct {
	method, path string
	public       bool // no token needed
	handle       func(s *Server, w http.ResponseWriter, r *http.Request, p Principal)
}

// Routes are registered in this order; openapi_test.go keeps openapi.json in step.
var routes = []route{
	{"GET", "/healthz", true, (*Server).healthz},
	{"GET", "/readyz", true, (*Server).readyz},
	{"GET", "/metrics", true, nil}, // set in New: the Prometheus handler
	{"GET", "/public/v2/openapi.json", true, (*Server).openapi},
	{"POST", "/public/v2/jobs", false, (*Server).postJob},
	{"GET", "/public/v2/jobs", false, (*Server).listJobs},
	{"POST", "/public/v2/jobs/restart", false, (*Server).restartJob},
	{"GET", "/public/v2/jobs/{job_name}", false, (*Server).getJob},
	{"DELETE", "/public/v2/jobs/{job_name}", false, (*Server).deleteJob},
	{"GET", "/public/v2/jobs/{job_name}/logs", false, (*Server).jobLogs},
	{"GET", "/public/v2/jobs/{job_name}/preemptors", false, (*Server).preemptors},
	{"GET", "/public/v2/jobs/{job_name}/params", false, (*Server).params},
	{"GET", "/public/v2/jobs/{job_name}/nodes", false, (*Server).nodes},
	{"GET", "/public/v2/jobs/elastic/{job_name}/pods", false, (*Server).elasticPods},
	{"POST", "/public/v2/jobs/{job_name}/checkpoint", false, (*Server).checkpoint},
	{"GET", "/public/v2/allocations", false, (*Server).listAllocations},
	{"GET", "/public/v2/allocations/{$}", false, (*Server).listAllocations}, // ML Space's spelling
	{"GET", "/public/v2/allocations/{id}", false, (*Server).getAllocation},
	{"GET", "/public/v2/allocations/{id}/nodes", false, (*Server).allocationNodes},
	{"GET", "/public/v2/allocations/{id}/instance-types", false, (*Server).allocationInstanceTypes},
	{"GET", "/public/v2/allocations/{name}/queue", false, (*Server).queue},
	{"GET", "/public/v2/instance_types/{region}/available", false, (*Server).availableInstanceTypes},
	{"GET", "/public/v2/queues", false, (*Server).listQueues},
	{"GET", "/public/v2/queues/{$}", false, (*Server).listQueues}, // ML Space's spelling
	{"GET", "/public/v2/queues/{id}", false, (*Server).getQueue},
	{"GET", "/public/v2/queues/{id}/jobs", false, (*Server).queueJobs},
	{"GET", "/public/v2/queues/{id}/instance-types", false, (*Server).queueInstanceTypes},
	{"GET", "/public/v2/queues/{id}/awaiting-launch-resources", false, (*Server).awaitingLaunch},
	{"POST", "/public/v2/notebooks", false, (*Server).postNotebook},
	{"DELETE", "/public/v2/notebooks/{name}", false, (*Server).deleteNotebook},
	{"GET", "/public/v2/configs", false, (*Server).configs},
	{"GET", "/ui/api/allocations/{name}/gpus", false, (*Server).uiGPUs},
	{"GET", "/ui/api/allocations/{name}/timeline", false, (*Server).uiTimeline},
}

// New builds a server.
func New(opts Options) (*Server, error) {
	if opts.Config == nil || opts.Backend == nil || opts.Tokens == nil {
		return nil, errors.New("api: Config, Backend and Tokens are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 10 * time.Second
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 500 * time.Millisecond
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.NotFoundFloor <= 0 {
		opts.NotFoundFloor = DefaultNotFoundFloor
	}
	s := &Server{backend: opts.Backend, tokens: opts.Tokens, log: opts.Logger, opts: opts,
		mux: http.NewServeMux(), metrics: newMetrics(), waitUntil: waitUntil}
	s.live.Store(opts.Config)
	ws := opts.Config.WorkspacesDir
	if ws == "" {
		ws = filepath.Join(opts.Config.DataDir, "workspaces")
	}
	var err error
	if s.workspacesDir, err = filepath.Abs(ws); err != nil {
		return nil, fmt.Errorf("api: workspaces_dir: %w", err)
	}
	for _, rt := range routes {
		s.mux.Handle(rt.method+" "+rt.path, s.wrap(rt))
	}
	// A literal path that a wildcard route of another method would take
	// (GET /public/v2/jobs/restart looks like GET /public/v2/jobs/{job_name})
	// gets that method too, answered 405 like any other wrong method.
	for _, rt := range routes {
		sample := wildcard.ReplaceAllString(rt.path, "x")
		for _, m := range []string{"GET", "POST", "DELETE", "PUT", "PATCH"} {
			probe, _ := http.NewRequest(m, sample, nil)
			if _, pattern := s.mux.Handler(probe); m != rt.method && pattern != "/" && !strings.HasSuffix(pattern, " "+rt.path) &&
				!wildcard.MatchString(rt.path) {
				s.mux.HandleFunc(m+" "+rt.path, s.notFound)
			}
		}
	}
	// The dashboard's pages (see ui.go); they hold no data, so need no token.
	s.mux.Handle("GET /ui/", s.uiAssets())
	s.mux.HandleFunc("/", s.notFound)
	return s, nil
}

// wildcard matches the wildcards of a route's path.
var wildcard = regexp.MustCompile(`\{[a-z_]+\}`)

// ServeHTTP records metrics and an access log line around the routes. The
// log line never includes the Authorization header.
//
// It also keeps every connection answerable: a declared body must arrive
// within BodyTimeout (readBody answers 408 otherwise), and an answer given
// without reading the whole body (401, 404, 405, 415, 413, 408, or a GET
// with a body) closes the connection instead of waiting for the rest of a
// body that may never come.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w, code: http.StatusOK}
	rc := http.NewResponseController(rec)
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		rec.body = &trackedBody{ReadCloser: r.Body}
		r.Body = rec.body
		_ = rc.SetReadDeadline(start.Add(s.opts.BodyTimeout)) // not all writers support it (httptest)
	} else {
		// The request has been read: the handler may take its time (a
		// followed log), and the server's ReadTimeout must not cut it.
		_ = rc.SetReadDeadline(time.Time{})
	}
	s.mux.ServeHTTP(rec, r)
	route := r.Pattern
	if route == "" || route == "/" {
		route = "unmatched"
	}
	d := time.Since(start)
	s.metrics.observe(route, methodLabel(r.Method), rec.code, d)
	s.log.Info("request", "method", methodLabel(r.Method), "route", route, "path", r.URL.Path, "code", rec.code,
		"duration_ms", d.Milliseconds(), "remote", r.RemoteAddr)
}

// methodLabel keeps the metrics' method label to a few values whatever
// methods clients invent.
func methodLabel(m string) string {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS":
		return m
	}
	return "OTHER"
}

// trackedBody remembers whether the body was read to its end.
type trackedBody struct {
	io.ReadCloser
	eof atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// wrap adds authentication and turns a panic into a 500 answer.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("panic", "route", r.Pattern, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				writeError(w, errorf(http.StatusInternalServerError, codeInternal, "", "internal error"))
			}
		}()
		if rt.path == "/metrics" {
			s.metrics.handler().ServeHTTP(w, r)
			return
		}
		var p Principal
		if !rt.public {
			token, err := bearer(r)
			if err != nil {
				writeError(w, errorf(http.StatusUnauthorized, codeUnauthorized, "", err.Error()))
				return
			}
			var ok bool
			if p, ok = s.tokens.Lookup(token); !ok {
				writeError(w, errorf(http.StatusUnauthorized, codeUnauthorized, "", "unknown token"))
				return
			}
			if err := workspaceHeader(r, p); err != nil {
				writeError(w, errorf(http.StatusForbidden, codeForbidden, "x-workspace-id", err.Error()))
				return
			}
		}
		rt.handle(s, w, r, p)
	})
}

// notFound answers paths no route has (404), or a route's path with another
// method (405), in the API's error format.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	var allowed []string
	for _, rt := range routes {
		probe, err := http.NewRequest(rt.method, r.URL.String(), nil)
		if err != nil {
			continue
		}
		if _, pattern := s.mux.Handler(probe); pattern == rt.method+" "+rt.path {
			allowed = append(allowed, rt.method)
		}
	}
	if len(allowed) > 0 {
		for _, m := range allowed {
			w.Header().Add("Allow", m)
		}
		writeError(w, errorf(http.StatusMethodNotAllowed, codeMethod, "", fmt.Sprintf("%s is not allowed here; use %v", r.Method, allowed)))
		return
	}
	writeError(w, errorf(http.StatusNotFound, codeNotFound, "", "no such endpoint; see /public/v2/openapi.json"))
}

// call gives the Temporal calls of one request their deadline.
func (s *Server) call(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.opts.CallTimeout)
}

// readJSONBody reads the JSON body of a POST: its Content-Type must say
// JSON (415 otherwise), and it must arrive whole within BodyTimeout (408)
// and be at most MaxBodyBytes (413).
func (s *Server) readJSONBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if err := requireJSON(r); err != nil {
		return nil, err
	}
	return s.readBody(w, r)
}

// requireJSON accepts Content-Type application/json (or application/*+json),
// in UTF-8 if a charset is given.
func requireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	const want = "send the body as JSON with Content-Type: application/json"
	if ct == "" {
		return errorf(http.StatusUnsupportedMediaType, codeMediaType, "Content-Type", "the request has no Content-Type; "+want)
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		shown := ct
		if len(shown) > 80 {
			shown = strings.ToValidUTF8(shown[:80], "") + "…"
		}
		return errorf(http.StatusUnsupportedMediaType, codeMediaType, "Content-Type", fmt.Sprintf("%q is not JSON; %s", shown, want))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return errorf(http.StatusUnsupportedMediaType, codeMediaType, "Content-Type", fmt.Sprintf("charset %q is not allowed; JSON bodies are UTF-8", cs))
	}
	return nil
}

// readBody reads a request body of at most MaxBodyBytes, which must arrive
// within BodyTimeout of the request (ServeHTTP set the read deadline).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	defer func() { _ = http.NewResponseController(w).SetReadDeadline(time.Time{}) }() // not every ResponseWriter has deadlines (httptest)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return nil, errorf(http.StatusRequestEntityTooLarge, codeTooLarge, "", fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes))
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, errorf(http.StatusRequestTimeout, codeTimeout, "", fmt.Sprintf("the body did not arrive within %s; send it whole, at once", s.opts.BodyTimeout))
		}
		return nil, errorf(http.StatusBadRequest, "unreadable_body", "", "could not read the body: "+err.Error())
	}
	return body, nil
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request, _ Principal) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz is ready when Temporal answers.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request, _ Principal) {
	ctx, cancel := context.WithTimeout(r.Context(), min(s.opts.CallTimeout, 3*time.Second))
	defer cancel()
	if err := s.backend.Health(ctx); err != nil {
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: codeUnavailable, Message: "Temporal is not reachable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// config is the config requests are checked against.
func (s *Server) config() *config.Config { return s.live.Load() }

// configReloader is a backend that checks jobs against a config of its own
// (client.Client): Reload hands it the new one too.
type configReloader interface{ SetConfig(*config.Config) }

// Reload takes next in place of the running config, if only queues changed
// (config.CheckReload): a queue's nodes, classes, defaults and workspaces
// then apply to the requests that come after. Otherwise nothing changes and
// the error says what may not.
func (s *Server) Reload(next *config.Config) error {
	if err := config.CheckReload(s.config(), next); err != nil {
		return err
	}
	if r, ok := s.backend.(configReloader); ok {
		r.SetConfig(next)
	}
	s.live.Store(next)
	return nil
}
