package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
)

// fuzzServer is a server over the fake backend with one user token.
func fuzzServer(tb testing.TB) (*Server, *fakeBackend, string) {
	tb.Helper()
	cfg := config.Default()
	cfg.DataDir = tb.TempDir()
	fb := newFakeBackend(cfg)
	tokens := &Tokens{}
	token := "tq_fuzz-token"
	entries, err := parseEntries(TokenFile{Tokens: []TokenEntry{{SHA256: HashToken(token), User: "fuzzer", Workspace: "ws", Role: RoleUser}}})
	if err != nil {
		tb.Fatal(err)
	}
	tokens.entries = entries
	s, err := New(Options{Config: cfg, Backend: fb, Tokens: tokens, NotFoundFloor: time.Microsecond})
	if err != nil {
		tb.Fatal(err)
	}
	return s, fb, token
}

// FuzzDecodeRunJobRequest posts arbitrary bodies to POST /public/v2/jobs
// over a fake backend. The decoder must never panic; the handler must never
// answer 5xx, must answer errors in the API's format, must start a job
// exactly when it answers 200, and must accept what decodes and validates.
func FuzzDecodeRunJobRequest(f *testing.F) {
	seeds := []string{
		`{"script":"echo hi","base_image":"img","instance_type":"a100plus.8gpu.80vG.96C.768G"}`,
		`{"base_image":"cr.ai.cloud.ru/aicloud-base-images/py3.10-torch2.1.2:0.0.40","script":"/home/jovyan/test_script.py","region":"SR006","instance_type":"a100plus.8gpu.80vG.96C.768G","n_workers":2,"type":"pytorch2","processes_per_worker":1,"job_desc":"medium-priority training job","priority_class":"medium","max_retry":3}`,
		`{"script":"s","base_image":"i","instance_type":"a100.1gpu","processes_per_worker":"default","env_variables":{"A":"1"},"flags":{"lr":"0.1"}}`,
		`{"script":"s","base_image":"i","instance_type":"cpu.8C.32G","health_params":{"log_period":30,"action":"restart"},"logs_dir":"/tmp"}`,
		`{"script":"s","base_image":"i","instance_type":"a100.1gpu","type":"pytorch_elastic","n_workers":2,"elastic_min_workers":1,"elastic_max_workers":"default","elastic_max_restarts":3,"queue_name":"default","internet":true,"conda_env":"torch","shm_size_class":"large","include_nodes":["n1"],"exclude_nodes":["n2"],"tmp_storage":"t","stop_timer":30,"cuda11":true,"forbid_internet":false,"forbid_s3":false,"in_communal_cluster":false,"preflight_check":true,"priority_class":"shared-low","health_params":{"log_period":30,"sub_actions":["notify"]}}`,
		`{"script":"s","base_image":"i","instance_type":"a100.1gpu","type":"pytorch2","pytorch_use_env":true,"shm_size_class":"tiny"}`,
		`{ base_image='x', script='/s.py' }`,
		`{"Script":"s","base_image":"i","instance_type":"a100.1gpu"}`,
		`{"script":"s","script":"t","base_image":"i","instance_type":"a100.1gpu"}`,
		`{"script":"s","base_image":"i","instance_type":"a100.1gpu","n_workers":1e400}`,
		`{"script":"s","base_image":"i","instance_type":"a100.1gpu","max_retry":-1}`,
		`{"script":"s","base_image":"i","instance_type":"a100.1gpu","env_variables":{"A":"\u0000"}}`,
		`{"script":"s","base_image":"i","instance_type":"a100.1gpu","env_variables":{"A":"1","A":"2"}}`,
		`{"script":"s","base_image":"i","instance_type":"a100.1gpu","health_params":{"Action":"restart","action":"delete"}}`,
		`{"script":"s","base_image":"i","instance_type":"a100.1gpu","checkpoint_dir":"../../etc"}`,
		`{"script":"s","base_image":"i","instance_type":"a100.1gpu","processes_per_worker":1000000}`,
		`[]`, `null`, ``, `{}`, `{"script":1}`, `{"script":"s"} {}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	s, fb, token := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		// A hang is a failure too: crash with the input rather than stall.
		watchdog := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("input took over 10s: %q", body)) })
		defer watchdog.Stop()
		decoded, decodeErr := protocol.DecodeRunJob(body)
		spec := decoded.Spec
		if decodeErr != nil {
			var fe *protocol.FieldError
			var je *protocol.JSONError
			if !errors.As(decodeErr, &fe) && !errors.As(decodeErr, &je) {
				t.Fatalf("decode error of unexpected type %T: %v", decodeErr, decodeErr)
			}
		}
		before := fb.started()
		req := httptest.NewRequest("POST", "/public/v2/jobs", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		started := fb.started() - before
		if rec.Code >= 500 {
			t.Fatalf("answered %d for %q: %s", rec.Code, body, rec.Body)
		}
		if rec.Code == http.StatusOK {
			if started != 1 {
				t.Fatalf("answered 200 but started %d jobs", started)
			}
			var sub submitted
			if err := json.Unmarshal(rec.Body.Bytes(), &sub); err != nil || sub.JobName == "" {
				t.Fatalf("bad 200 answer %s", rec.Body)
			}
			return
		}
		if started != 0 {
			t.Fatalf("answered %d but started %d jobs", rec.Code, started)
		}
		var e struct {
			Error *Error `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == nil || e.Error.Code == "" || e.Error.Message == "" {
			t.Fatalf("answered %d without an error body: %s", rec.Code, rec.Body)
		}
		if rec.Code != 400 && rec.Code != 413 && rec.Code != 422 {
			t.Fatalf("answered %d for bad input: %s", rec.Code, rec.Body)
		}
		if decodeErr == nil && spec.BaseImage != "" {
			checked := spec
			if _, err := client.Check(s.config(), &checked); err == nil && protocol.CheckLimits(checked) == nil {
				_, err1 := protocol.ConfineDir("checkpoint_dir", s.workspaceDir("ws"), checked.CheckpointDir)
				_, err2 := protocol.ConfineDir("logs_dir", s.workspaceDir("ws"), decoded.LogsDir)
				if err1 == nil && err2 == nil {
					t.Fatalf("a valid request was rejected with %d: %s", rec.Code, rec.Body)
				}
			}
		}
	})
}

// Choices of FuzzRequest: the fuzzer picks by index.
var (
	fuzzMethods = []string{"GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS", "BREW"}
	fuzzPaths   = []string{
		"/healthz", "/readyz", "/metrics", "/public/v2/openapi.json", "/public/v2/jobs", "/public/v2/jobs/restart",
		"/public/v2/jobs/%s", "/public/v2/jobs/%s/logs", "/public/v2/jobs/%s/preemptors", "/public/v2/allocations/%s/queue",
		"/public/v2/notebooks", "/public/v2/notebooks/%s", "/public/v2/configs", "/public/v2/%s", "/%s",
		"/public/v2/jobs/%s/params", "/public/v2/jobs/%s/nodes", "/public/v2/jobs/elastic/%s/pods", "/public/v2/allocations",
		"/public/v2/allocations/", "/public/v2/allocations/%s", "/public/v2/allocations/%s/nodes",
		"/public/v2/allocations/%s/instance-types", "/public/v2/instance_types/%s/available",
		"/public/v2/queues", "/public/v2/queues/%s", "/public/v2/queues/%s/jobs", "/public/v2/queues/%s/instance-types",
		"/ui/api/allocations/%s/gpus", "/ui/api/allocations/%s/timeline", "/ui/%s",
	}
	fuzzNames  = []string{jobB, jobA, nbB, nbA, cliA, fakeAlloc, "t", "restart", "", fakeAlloc + ":default", "t:prod"}
	fuzzTypes  = []string{"application/json", "", "application/json; charset=utf-8", "text/plain", "application/x-www-form-urlencoded", "application/merge-patch+json", "application/json; charset=latin1", "garbage;;="}
	fuzzTokens = []string{bobToken, aliceTok, adminTok, "", "tq_nobody"}
	// Foreign names by token: what that user must never see.
	fuzzForeign = map[string][]string{bobToken: foreignToBob, aliceTok: {jobB, nbB}}
)

// FuzzRequest sends arbitrary requests — method, path, query, headers and
// body — through the whole handler over a fake backend holding jobs of two
// workspaces. It must never panic, never answer 5xx, answer every error in
// the API's format, start a job exactly when a POST that starts jobs answers
// 200, and never show a user the name of another workspace's job that the
// request itself did not name.
func FuzzRequest(f *testing.F) {
	seeds := []struct {
		method, path, name uint8
		seg, query         string
		ctype, token       uint8
		key                string
		body               string
	}{
		{0, 6, 0, "", "", 0, 0, "", ""},
		{0, 7, 0, "", "verbose=true&attempt=1", 0, 0, "", ""},
		{0, 7, 0, "", "verbose=true&follow=true&tail=1", 0, 0, "", ""},
		{0, 8, 0, "", "", 0, 0, "", ""},
		{0, 9, 5, "", "region=SR006", 0, 0, "", ""},
		{0, 4, 0, "", "status=Pending&limit=5&offset=1", 0, 0, "", ""},
		{1, 4, 0, "", "", 0, 0, "k1", `{"script":"echo","base_image":"i","instance_type":"a100plus.1gpu"}`},
		{1, 4, 0, "", "", 1, 0, "", `{"script":"echo","base_image":"i","instance_type":"a100plus.1gpu"}`},
		{1, 4, 0, "", "", 3, 0, "", `{"script":"echo","base_image":"i","instance_type":"a100plus.1gpu"}`},
		{1, 5, 0, "", "", 0, 0, "", `{"job_name":"` + jobB + `"}`},
		{1, 5, 0, "", "", 0, 0, "", `{"job_name":"` + jobA + `"}`},
		{0, 5, 0, "", "", 0, 0, "", ""},
		{1, 10, 0, "", "", 0, 0, "", `{"allocation_name":"default","env_variables":{"A":"1","A":"1"}}`},
		{2, 11, 2, "", "", 0, 0, "", ""},
		{2, 6, 1, "", "", 0, 0, "", ""},
		{3, 6, 0, "", "", 0, 1, "", ""},
		{7, 13, 8, "x/../../y", "", 0, 3, "", ""},
		{0, 6, 8, "..%2f..", "tail=99999999999999999999", 0, 0, "", ""},
		{0, 15, 0, "", "", 0, 0, "", ""},
		{0, 15, 1, "", "", 0, 0, "", ""},
		{0, 16, 2, "", "region=SR006", 0, 0, "", ""},
		{0, 17, 0, "", "", 0, 0, "", ""},
		{0, 18, 0, "", "region=SR006", 0, 0, "", ""},
		{0, 19, 0, "", "", 0, 1, "", ""},
		{0, 20, 5, "", "", 0, 0, "", ""},
		{0, 21, 5, "", "region=SR006", 0, 0, "", ""},
		{0, 22, 5, "", "", 0, 0, "", ""},
		{0, 23, 8, "SR006", "allocation_name=default&queue_name=default", 0, 0, "", ""},
		{0, 6, 0, "", "view=mlspace", 0, 0, "", ""},
		{0, 6, 1, "", "view=mlspace&region=SR006", 0, 0, "", ""},
		{2, 6, 0, "", "region=SR006&view=mlspace", 0, 0, "", ""},
	}
	for _, sd := range seeds {
		f.Add(sd.method, sd.path, sd.name, sd.seg, sd.query, sd.ctype, sd.token, sd.key, []byte(sd.body))
	}
	s, fb := twoWorkspaceServer(f)
	f.Fuzz(func(t *testing.T, mi, pi, ni uint8, seg, query string, ci, ti uint8, key string, body []byte) {
		watchdog := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("request took over 10s: %d %d %d %q %q %q", mi, pi, ni, seg, query, body)) })
		defer watchdog.Stop()
		fb.reset()
		method := fuzzMethods[int(mi)%len(fuzzMethods)]
		name := fuzzNames[int(ni)%len(fuzzNames)]
		if name == "" {
			name = seg
		}
		path := fuzzPaths[int(pi)%len(fuzzPaths)]
		if strings.Contains(path, "%s") {
			path = fmt.Sprintf(path, name)
		}
		u := &url.URL{Path: path, RawQuery: query}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond) // ends followed logs
		defer cancel()
		req := (&http.Request{Method: method, URL: u, RequestURI: u.RequestURI(), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Host: "api.test", RemoteAddr: "192.0.2.7:4242",
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}).WithContext(ctx)
		token := fuzzTokens[int(ti)%len(fuzzTokens)]
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if ct := fuzzTypes[int(ci)%len(fuzzTypes)]; ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		started := fb.started()
		res := rec.Result()
		out, _ := io.ReadAll(res.Body)
		if res.StatusCode >= 500 {
			t.Fatalf("%s %s answered %d: %s", method, u, res.StatusCode, out)
		}
		submits := method == "POST" && (req.Pattern == "POST /public/v2/jobs" || req.Pattern == "POST /public/v2/jobs/restart" || req.Pattern == "POST /public/v2/notebooks")
		if res.StatusCode == 200 && submits && key == "" && started != 1 {
			t.Fatalf("%s %s answered 200 but started %d jobs", method, u, started)
		}
		if (res.StatusCode != 200 || !submits) && started != 0 {
			t.Fatalf("%s %s answered %d but started %d jobs: %s", method, u, res.StatusCode, started, out)
		}
		if res.StatusCode >= 400 && method != "HEAD" {
			var e struct {
				Error *Error `json:"error"`
			}
			if err := json.Unmarshal(out, &e); err != nil || e.Error == nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Fatalf("%s %s answered %d without an error body: %s", method, u, res.StatusCode, out)
			}
		}
		asked := method + " " + u.String() + " " + string(body) + " " + key
		var text strings.Builder
		text.Write(out)
		for k, vs := range res.Header {
			text.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
		}
		for _, n := range leaked(text.String(), fuzzForeign[token]) {
			if !strings.Contains(asked, n) {
				t.Fatalf("%s %s answered %d naming %s of another workspace: %s", method, u, res.StatusCode, n, text.String())
			}
		}
	})
}
