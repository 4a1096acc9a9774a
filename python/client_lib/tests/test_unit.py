"""Unit tests of client_lib: request building, answer and output shapes,
retries and errors, against a scripted fake of the API (fakeapi.py). What
the real API does is tested in test_clientlib_e2e.py."""

import contextlib
import datetime
import inspect
import io
import json
import os
import threading
import time
import unittest
import warnings

import client_lib
from client_lib import trainq

from fakeapi import FakeAPI

# RunJobRequest's 33 fields (ML Space's table).
FIELDS_33 = {
    "script", "base_image", "instance_type", "region", "type", "n_workers", "processes_per_worker", "job_desc",
    "internet", "conda_env", "max_retry", "priority_class", "queue_name", "allocation_name", "checkpoint_dir",
    "logs_dir", "health_params", "shm_size_class", "flags", "env_variables", "pytorch_use_env", "elastic_min_workers",
    "elastic_max_workers", "elastic_max_restarts", "include_nodes", "exclude_nodes", "tmp_storage", "stop_timer",
    "cuda11", "preflight_check", "forbid_internet", "forbid_s3", "in_communal_cluster",
}

# The priorities page's request, as the page writes it.
PAGE = dict(base_image="cr.ai.cloud.ru/aicloud-base-images/py3.10-torch2.1.2:0.0.40", script="/home/jovyan/test_script.py",
            region="SR006", instance_type="a100plus.8gpu.80vG.96C.768G", n_workers=2, type="pytorch2",
            processes_per_worker=1, job_desc="medium-priority training job", priority_class="medium", max_retry=3)

NAME = "lm-mpi-job-00000000-0000-0000-0000-000000000001"


def status_body(status, **more):
    d = {"job_name": NAME, "status": status, "created_at": "2026-12-01T10:00:00.123456789Z", "attempt": 1,
         "preemptors": [], "attempts": []}
    d.update(more)
    return d


class Base(unittest.TestCase):
    def setUp(self):
        self.api = FakeAPI()
        self.addCleanup(self.api.close)
        self.env = {k: os.environ.get(k) for k in ("TRAINQ_API_URL", "TRAINQ_API_TOKEN", "TRAINQ_REGION", "TRAINQ_API_RETRY_BUDGET", "TRAINQ_WORKSPACE_ID")}
        self.addCleanup(self._restore)
        os.environ["TRAINQ_API_URL"] = self.api.url
        os.environ["TRAINQ_API_TOKEN"] = "tq_secret"
        os.environ.pop("TRAINQ_REGION", None)
        os.environ.pop("TRAINQ_API_RETRY_BUDGET", None)
        os.environ.pop("TRAINQ_WORKSPACE_ID", None)

    def _restore(self):
        for k, v in self.env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def stdout_of(self, fn, *a, **kw):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            fn(*a, **kw)
        return buf.getvalue()


class TestJobRequest(Base):
    def test_signature_lists_the_33_fields(self):
        params = inspect.signature(client_lib.Job).parameters
        named = {n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD}
        self.assertEqual(named, FIELDS_33)
        self.assertEqual(len(client_lib.RUN_JOB_FIELDS), 33)
        self.assertNotIn(inspect.Parameter.VAR_KEYWORD, [p.kind for p in params.values()])
        # A script that drops what the signature does not take keeps every field.
        kw = dict(PAGE, internet=True, shm_size_class="large", queue_name="shared", unknown_arg=1)
        kept = {k: v for k, v in kw.items() if k in params}
        self.assertEqual(set(kept), set(kw) - {"unknown_arg"})

    def test_submit_sends_exactly_the_fields_given(self):
        self.api.route("POST", "/jobs", body={"job_name": NAME, "status": "Pending"})
        job = client_lib.Job(script="echo hi", base_image="busybox", instance_type="a100.1gpu")
        self.assertIsNone(job.job_name)
        self.assertEqual(job.submit(), 'Job "%s" created.' % NAME)
        self.assertEqual(job.job_name, NAME)
        req = self.api.requests[-1]
        self.assertEqual(req.json(), {"script": "echo hi", "base_image": "busybox", "instance_type": "a100.1gpu"})
        self.assertEqual(req.headers["Authorization"], "Bearer tq_secret")
        self.assertEqual(req.headers["Content-Type"], "application/json")
        self.assertTrue(req.headers.get("Idempotency-Key"))

    def test_topology_is_sent_by_keyword(self):
        """trainq's required_topology / preferred_topology are keyword-only, so
        ML Space's positional calls keep their meaning."""
        self.api.route("POST", "/jobs", body={"job_name": NAME, "status": "Pending"})
        client_lib.Job(script="s", base_image="b", instance_type="a100.8gpu", n_workers=2, required_topology="rack").submit()
        self.assertEqual(self.api.requests[-1].json()["required_topology"], "rack")
        self.assertNotIn("preferred_topology", self.api.requests[-1].json())
        params = inspect.signature(client_lib.Job).parameters
        self.assertIs(params["preferred_topology"].kind, inspect.Parameter.KEYWORD_ONLY)

    def test_priorities_page_request_and_typed_helpers_send_the_same_body(self):
        self.api.route("POST", "/jobs", body={"job_name": NAME, "status": "Pending"})
        client_lib.Job(**PAGE).submit()
        plain_body = self.api.requests[-1].body
        typed = dict(PAGE, type=client_lib.Job.Type.pytorch2, region=client_lib.RegionMT.SR006,
                     priority_class=client_lib.PriorityClass.medium)
        client_lib.Job(**typed).submit()
        self.assertEqual(json.loads(plain_body), PAGE)
        self.assertEqual(json.loads(self.api.requests[-1].body), PAGE)

    def test_all_33_fields_and_health_params(self):
        self.api.route("POST", "/jobs", body={"job_name": NAME, "status": "Pending"})
        kw = {f: True for f in FIELDS_33}
        kw["health_params"] = client_lib.JobHealthParams(log_period=30, action=client_lib.JobHealthAction.restart,
                                                         sub_actions=[client_lib.JobHealthSubAction.notify])
        client_lib.Job(**kw).submit()
        body = self.api.requests[-1].json()
        self.assertEqual(set(body), FIELDS_33)
        self.assertEqual(body["health_params"], {"log_period": 30, "action": "restart", "sub_actions": ["notify"]})
        self.assertEqual(client_lib.JobHealthParams(log_period=20).to_json(), {"log_period": 20})
        self.assertEqual(client_lib.RegionMT.DGX2_MT, "DGX2-MT")
        self.assertEqual(json.dumps(client_lib.Job.Type.pytorch_elastic), '"pytorch_elastic"')

    def test_region_comes_from_TRAINQ_REGION_unless_given(self):
        self.api.route("POST", "/jobs", body={"job_name": NAME, "status": "Pending"})
        os.environ["TRAINQ_REGION"] = "SR004"
        client_lib.Job(script="x", base_image="b", instance_type="a100.1gpu").submit()
        self.assertEqual(self.api.requests[-1].json()["region"], "SR004")
        client_lib.Job(script="x", base_image="b", instance_type="a100.1gpu", region="SR006").submit()
        self.assertEqual(self.api.requests[-1].json()["region"], "SR006")

    def test_warnings_are_passed_through(self):
        self.api.route("POST", "/jobs", body={"job_name": NAME, "status": "Pending",
                                              "warnings": ["cuda11 is deprecated and has no effect"]})
        self.api.route("GET", "/jobs/" + NAME, body=status_body("Running", warnings=["cuda11 is deprecated and has no effect"]))
        job = client_lib.Job(script="x", base_image="b", instance_type="a100.1gpu", cuda11=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.assertEqual(job.submit(), 'Job "%s" created.' % NAME)
        self.assertEqual(job.warnings, ["cuda11 is deprecated and has no effect"])
        self.assertEqual([issubclass(w.category, client_lib.TrainqWarning) for w in caught], [True])
        self.assertIn("cuda11", str(caught[0].message))
        self.assertEqual(trainq.status(NAME).warnings, ["cuda11 is deprecated and has no effect"])

    def test_status_with_expected_start(self):
        body = status_body("Pending")
        body.update(expected_start_at="2026-11-30T13:00:00Z", expected_start="if lm-mpi-job-x ends by its time limit at 13:00")
        self.api.route("GET", "/jobs/" + NAME, body=body)
        st = trainq.status(NAME, expected_start=True)
        self.assertEqual(self.api.requests[-1].query, {"expected_start": ["true"]})
        self.assertEqual(st.expected_start_at, datetime.datetime(2026, 11, 30, 13, 0, tzinfo=datetime.timezone.utc))
        self.assertIn("ends by its time limit", st.expected_start)
        self.assertIsNone(st.expected_start_earliest)  # no range until the allocation has a record

    def test_status_with_expected_start_range(self):
        body = status_body("Pending")
        body.update(expected_start_at="2026-11-30T13:00:00Z", expected_start="if lm-mpi-job-x ends by its time limit at 13:00",
                    expected_start_earliest="2026-11-30T12:40:00Z", expected_start_latest="2026-11-30T15:10:00Z")
        self.api.route("GET", "/jobs/" + NAME, body=body)
        st = trainq.status(NAME, expected_start=True)
        self.assertEqual(st.expected_start_earliest, datetime.datetime(2026, 11, 30, 12, 40, tzinfo=datetime.timezone.utc))
        self.assertEqual(st.expected_start_latest, datetime.datetime(2026, 11, 30, 15, 10, tzinfo=datetime.timezone.utc))
        trainq.status(NAME)
        self.assertEqual(self.api.requests[-1].query, {}, "not asked unless wanted")

    def test_status_says_a_running_attempt_is_on_loan(self):
        body = status_body("Running")
        body.update(attempts=[{"number": 1, "queued_at": "2026-11-30T12:00:00Z", "started_at": "2026-11-30T12:01:00Z", "on_loan": True}])
        self.api.route("GET", "/jobs/" + NAME, body=body)
        self.assertTrue(trainq.status(NAME).on_loan)
        body["attempts"][0]["ended_at"] = "2026-11-30T12:30:00Z"
        self.assertFalse(trainq.status(NAME).on_loan, "an ended attempt is no longer on loan")
        body["attempts"] = [{"number": 1, "queued_at": "2026-11-30T12:00:00Z", "started_at": "2026-11-30T12:01:00Z"}]
        self.assertFalse(trainq.status(NAME).on_loan)

    def test_each_submit_is_a_new_job_and_a_retry_keeps_its_key(self):
        answers = [(503, {"Retry-After": "1"}, {"error": {"code": "temporal_unavailable", "message": "try again"}})]

        def post(req):
            if answers:
                return answers.pop(0)
            return 200, {}, {"job_name": NAME, "status": "Pending"}
        self.api.route("POST", "/jobs", post)
        job = client_lib.Job(script="x", base_image="b", instance_type="a100.1gpu")
        t0 = time.monotonic()
        job.submit()
        self.assertGreaterEqual(time.monotonic() - t0, 1.0)
        k1, k2 = (r.headers["Idempotency-Key"] for r in self.api.requests[-2:])
        self.assertEqual(k1, k2)
        job.submit()
        self.assertNotEqual(self.api.requests[-1].headers["Idempotency-Key"], k1)


class TestStatusShapes(Base):
    def word(self, s):
        return s.split("=")[-1].lower()

    def test_status_text_after_last_equals_is_the_word(self):
        for api_word, want in [("Pending", "pending"), ("Starting", "starting"), ("Running", "running"),
                               ("Completed", "completed"), ("Failed", "failed"), ("Stopped", "stopped"),
                               ("running", "running"), ("completed", "completed")]:
            self.api.route("GET", "/jobs/" + NAME, body=status_body(api_word))
            s = client_lib.get_job_status(NAME, region="SR006")
            self.assertEqual(self.word(s), want, s)
            self.assertTrue(s.startswith('Job "%s"' % NAME), s)
            self.assertEqual(trainq.status(NAME).state, want.capitalize())

    def test_preempted_reads_stopped_and_says_by_whom(self):
        self.api.route("GET", "/jobs/" + NAME, body=status_body("Preempted", preemptors=[
            {"id": "lm-mpi-job-h", "name": "lm-mpi-job-h", "priority": "high", "type": "job", "attempt": 1,
             "preempted_at": "2026-12-01T10:00:05Z"}]))
        s = client_lib.get_job_status(NAME)
        self.assertEqual(self.word(s), "stopped")
        self.assertIn("Preempted by high job lm-mpi-job-h", s)
        st = trainq.status(NAME)
        self.assertEqual(st.state, "Preempted")
        self.assertTrue(st.terminal)
        self.assertEqual(st.preemptor.priority, "high")
        self.assertEqual(st.preemptor.preempted_at, datetime.datetime(2026, 12, 1, 10, 0, 5, tzinfo=datetime.timezone.utc))

    def test_pending_status_dataclass(self):
        self.api.route("GET", "/jobs/" + NAME, body=status_body("Pending", position=2, reason="needs 2 GPUs, 0 free",
                                                                 waiting_for=["lm-mpi-job-x"], priority_class="medium"))
        st = trainq.status(NAME)
        self.assertEqual((st.state, st.position, st.reason, st.priority_class), ("Pending", 2, "needs 2 GPUs, 0 free", "medium"))
        self.assertEqual(st.created_at, datetime.datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=datetime.timezone.utc))
        self.assertFalse(st.terminal)

    def test_unknown_job(self):
        self.api.route("GET", "/jobs/" + NAME, status=404, body={"error": {"code": "not_found", "message": "no such job"}})
        with self.assertRaises(client_lib.JobNotFoundError) as cm:
            client_lib.get_job_status(NAME)
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        # ML Space's own answer for an unknown job is 200 with this status.
        self.api.route("GET", "/jobs/" + NAME, body={"job_name": NAME, "status": "job not found"})
        with self.assertRaises(client_lib.NotFoundError):
            trainq.status(NAME)

    def test_jobs_prints_ml_space_lines_and_pages(self):
        rows = [{"job_name": "lm-mpi-job-%04d" % i, "status": "Completed", "created_dt": "2026-12-01T10:00:%02dZ" % (i % 60)}
                for i in range(1500)]

        def page(req):
            off, lim = int(req.query["offset"][0]), int(req.query["limit"][0])
            return 200, {}, {"count": len(rows), "offset": off, "limit": lim, "jobs": rows[off:off + lim]}
        self.api.route("GET", "/jobs", page)
        os.environ["TRAINQ_REGION"] = "SR006"
        out = self.stdout_of(client_lib.jobs)
        lines = out.splitlines()
        self.assertEqual(len(lines), 1500)
        created, name, status = lines[7].split(" : ")
        self.assertEqual((created, name, status), ("2026-12-01T10:00:07Z", "lm-mpi-job-0007", "Completed"))
        self.assertEqual([(r.query["offset"], r.query["limit"], r.query["region"]) for r in self.api.requests],
                         [(["0"], ["1000"], ["SR006"]), (["1000"], ["1000"], ["SR006"])])

    def test_kill_returns_a_status_string(self):
        self.api.route("DELETE", "/jobs/" + NAME, body={"job_name": NAME, "status": "Stopping"})
        self.assertEqual(client_lib.kill(NAME, region="SR006"), 'Job "%s" status=Stopping' % NAME)
        self.assertEqual(self.api.requests[-1].query, {"region": ["SR006"]})

    def test_job_methods_before_submit(self):
        job = client_lib.Job(script="x")
        with self.assertRaises(RuntimeError):
            job.status()

    def test_tables(self):
        self.api.route("GET", "/configs", body={"default_region": "SR006", "regions": [{"name": "SR006", "allocations": [
            {"name": "t", "instance_types": [{"name": "a100.1gpu", "family": "a100", "gpus": 1, "max_workers": 2},
                                              {"name": "a100.2gpu", "family": "a100", "gpus": 2, "max_workers": 2}]}]}]})
        self.api.route("GET", "/allocations/t/queue", body={"region": "SR006", "allocation_name": "t", "nodes": [
            {"name": "n1", "family": "a100", "gpus": 2, "free_gpus": 2}, {"name": "n2", "family": "a100", "gpus": 2, "free_gpus": 1}]})
        lines = self.stdout_of(client_lib.get_available_resources_count, region="SR006").splitlines()
        self.assertEqual([l.split() for l in lines], [["allocation", "instance_type", "count"], ["t", "a100.1gpu", "3"], ["t", "a100.2gpu", "1"]])
        lines = self.stdout_of(client_lib.get_instance_types).splitlines()
        self.assertEqual(lines[1].split(), ["SR006", "t", "a100.1gpu", "1", "2"])


class TestLogs(Base):
    def test_logs_prints_the_log(self):
        self.api.route("GET", "/jobs/%s/logs" % NAME, body=b"line 1\nline 2\n", headers={"Content-Type": "text/plain"})
        self.assertEqual(self.stdout_of(client_lib.logs, NAME, tail=200, verbose=False), "line 1\nline 2\n")
        self.assertEqual(self.api.requests[-1].query, {"tail": ["200"], "verbose": ["false"]})
        self.stdout_of(client_lib.logs, NAME)
        self.assertEqual(self.api.requests[-1].query, {})

    def test_follow_streams_line_by_line(self):
        got_first = threading.Event()
        waited = []

        def stream(req):
            def chunks():
                yield b"first\n"
                waited.append(got_first.wait(10))  # the client must have read line 1 before line 2 is sent
                yield b"second\n"
            return 200, {"Content-Type": "text/plain"}, chunks()
        self.api.route("GET", "/jobs/%s/logs" % NAME, stream)
        lines = []
        for line in trainq.logs(NAME, follow=True):
            lines.append(line)
            if line == "first":
                got_first.set()
        self.assertEqual(lines, ["first", "second"])
        self.assertEqual(waited, [True])
        self.assertEqual(self.api.requests[-1].query, {"follow": ["true"]})


    def test_a_cut_stream_raises(self):
        self.api.route("GET", "/jobs/%s/logs" % NAME, lambda req: (200, {"Content-Type": "text/plain"}, iter([b"one\n", None])))
        got = []
        with self.assertRaises(client_lib.APIConnectionError) as cm:
            for line in trainq.logs(NAME, follow=True):
                got.append(line)
        self.assertEqual(got, ["one"])
        self.assertEqual(cm.exception.code, "connection_lost")


class TestErrorsAndConfig(Base):
    def test_error_answer_carries_field_code_message(self):
        self.api.route("POST", "/jobs", status=422, body={"error": {"code": "invalid_value", "field": "max_retry",
                                                                    "message": "must be between 0 and 100, got 1000"}})
        with self.assertRaises(client_lib.ValidationError) as cm:
            client_lib.Job(script="x", base_image="b", instance_type="a100.1gpu", max_retry=1000).submit()
        e = cm.exception
        self.assertIsInstance(e, client_lib.APIError)
        self.assertIsInstance(e, client_lib.InvalidRequestError)
        self.assertEqual((e.status, e.code, e.field, e.message), (422, "invalid_value", "max_retry", "must be between 0 and 100, got 1000"))
        self.assertIn("max_retry", str(e))
        self.api.route("POST", "/jobs", status=400, body={"error": {"code": "unknown_field", "field": "internet", "message": "unknown field"}})
        with self.assertRaises(client_lib.BadRequestError) as cm:
            client_lib.Job(script="x", internet=True).submit()
        self.assertEqual(cm.exception.field, "internet")

    def test_429_then_ok_and_budget(self):
        answers = [(429, {"Retry-After": "1"}, {"error": {"code": "too_many_connections", "message": "slow down"}})]
        self.api.route("GET", "/jobs/" + NAME, lambda req: answers.pop(0) if answers else (200, {}, status_body("Running")))
        self.assertEqual(trainq.status(NAME).state, "Running")
        self.assertEqual(len(self.api.requests), 2)
        os.environ["TRAINQ_API_RETRY_BUDGET"] = "2.5"
        self.api.route("GET", "/jobs/" + NAME, status=503, body={"error": {"code": "worker_unavailable", "message": "busy"}},
                       headers={"Retry-After": "1"})
        t0 = time.monotonic()
        with self.assertRaises(client_lib.ServiceUnavailableError) as cm:
            trainq.status(NAME)
        self.assertLess(time.monotonic() - t0, 4)
        self.assertEqual(cm.exception.retry_after, 1.0)
        self.assertEqual(cm.exception.code, "worker_unavailable")
        self.assertEqual(len(self.api.requests), 2 + 3)  # 1 + 2 retries within 2.5 s

    def test_missing_variables_are_named(self):
        for var in ("TRAINQ_API_URL", "TRAINQ_API_TOKEN"):
            saved = os.environ.pop(var)
            with self.assertRaises(client_lib.ConfigError) as cm:
                client_lib.jobs()
            self.assertEqual(cm.exception.variable, var)
            self.assertIn(var, str(cm.exception))
            os.environ[var] = saved
        os.environ["TRAINQ_API_URL"] = "localhost:8080"
        with self.assertRaises(client_lib.ConfigError) as cm:
            client_lib.jobs()
        self.assertIn("TRAINQ_API_URL", str(cm.exception))

    def test_token_and_url_forms(self):
        self.api.route("GET", "/jobs/" + NAME, body=status_body("Running"))
        os.environ["TRAINQ_API_TOKEN"] = "Bearer tq_secret "
        os.environ["TRAINQ_API_URL"] = self.api.url + "/public/v2/"
        trainq.status(NAME)
        self.assertEqual(self.api.requests[-1].headers["Authorization"], "Bearer tq_secret")
        self.assertNotIn("tq_secret", repr(client_lib.Client.from_env()))
        self.assertNotIn("x-workspace-id", {k.lower() for k in self.api.requests[-1].headers})
        os.environ["TRAINQ_WORKSPACE_ID"] = "team-a"
        trainq.status(NAME)
        self.assertEqual({k.lower(): v for k, v in self.api.requests[-1].headers.items()}["x-workspace-id"], "team-a")

    def test_unreachable_api(self):
        os.environ["TRAINQ_API_URL"] = "http://127.0.0.1:1"
        os.environ["TRAINQ_API_RETRY_BUDGET"] = "1"
        t0 = time.monotonic()
        with self.assertRaises(client_lib.APIConnectionError) as cm:
            client_lib.Job(script="x").submit()
        self.assertEqual(cm.exception.status, 0)
        self.assertIn("127.0.0.1:1", str(cm.exception))
        self.assertGreaterEqual(time.monotonic() - t0, 0.5)  # retried once (a keyed POST is safe to repeat)

    def test_parse_time(self):
        self.assertEqual(trainq.parse_time("2026-12-01T10:00:00+03:00"), datetime.datetime(2026, 12, 1, 7, tzinfo=datetime.timezone.utc))
        self.assertEqual(trainq.parse_time(0), None)
        self.assertEqual(trainq.parse_time(1764583200).year, 2025)


if __name__ == "__main__":
    unittest.main()


class TestNotice(unittest.TestCase):
    def test_notice_is_none_until_the_file_comes_then_read_whole(self):
        import datetime
        import json
        import os
        import tempfile
        from client_lib import trainq
        path = os.path.join(tempfile.mkdtemp(), "notice.json")
        old = os.environ.get("TRAINQ_NOTICE_FILE")
        os.environ["TRAINQ_NOTICE_FILE"] = path
        try:
            self.assertIsNone(client_lib.preemption_notice())
            with open(path, "w") as f:
                f.write("")
            self.assertIsNone(trainq.notice(), "an empty file (a Kubernetes volume before the notice) is no notice")
            with open(path, "w") as f:
                json.dump({"reason": "preempted", "by": {"class": "high", "kind": "job"},
                           "deadline": "2026-12-01T10:00:30Z", "job": "lm-mpi-job-x", "attempt": 2}, f)
            n = trainq.notice()
            self.assertEqual((n.reason, n.by_class, n.by_kind, n.job, n.attempt), ("preempted", "high", "job", "lm-mpi-job-x", 2))
            at = datetime.datetime(2026, 12, 1, 10, 0, 0, tzinfo=datetime.timezone.utc)
            self.assertEqual(n.seconds_left(at), 30.0)
            d = client_lib.preemption_notice()
            self.assertEqual(d["by"], {"class": "high", "kind": "job"})
            del os.environ["TRAINQ_NOTICE_FILE"]
            with self.assertRaises(client_lib.ConfigError) as cm:
                trainq.notice()
            self.assertIn("TRAINQ_NOTICE_FILE", str(cm.exception))
        finally:
            if old is None:
                os.environ.pop("TRAINQ_NOTICE_FILE", None)
            else:
                os.environ["TRAINQ_NOTICE_FILE"] = old
