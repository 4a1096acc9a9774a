package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/workflows"
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
	s, err := New(Options{Config: cfg, Backend: fb, Tokens: tokens})
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
		`{"script":"s","base_image":"i","instance_type":"cpu.8C.32G","health_params":{"log_period":10,"action":"restart"},"logs_dir":"/tmp"}`,
		`{ base_image='x', script='/s.py' }`,
		`{"Script":"s","base_image":"i","instance_type":"a100.1gpu"}`,
		`{"script":"s","script":"t","base_image":"i","instance_type":"a100.1gpu"}`,
		`{"script":"s","base_image":"i","instance_type":"a100.1gpu","n_workers":1e400}`,
		`{"script":"s","base_image":"i","instance_type":"a100.1gpu","max_retry":-1}`,
		`{"script":"s","base_image":"i","instance_type":"a100.1gpu","env_variables":{"A":"\u0000"}}`,
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
		spec, _, decodeErr := protocol.DecodeRunJobRequest(body)
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
		if rec.Code != 400 && rec.Code != 422 {
			t.Fatalf("answered %d for bad input: %s", rec.Code, rec.Body)
		}
		if decodeErr == nil && spec.BaseImage != "" {
			checked := spec
			if _, err := workflows.Check(s.cfg, &checked); err == nil {
				t.Fatalf("a valid request was rejected with %d: %s", rec.Code, rec.Body)
			}
		}
	})
}
