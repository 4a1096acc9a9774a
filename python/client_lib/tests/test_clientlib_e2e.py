"""client_lib against a real stack: Temporal's dev server, trainq-worker and
trainq-api. api/clientlib_e2e_test.go starts them (api/harness_test.go's
config: region SR006; allocation default = 2 nodes of 8 a100plus GPUs,
t = 4 nodes of 2 a100 GPUs, q and w = 1 node of 2 a100 GPUs) and runs

    python3 -m unittest discover -s python/client_lib/tests -p 'test_*e2e*.py' -v

with TRAINQ_API_URL and TRAINQ_API_TOKEN set. Without them these tests skip.

ClientLibE2E needs only today's API. NewRunJobFieldsE2E needs the API that
accepts all 33 RunJobRequest fields (deprecated ones with warnings); it
skips, saying why, while the API refuses them as unknown fields."""

import contextlib
import inspect
import io
import json
import os
import statistics
import sys
import time
import unittest
import urllib.request
import uuid

import client_lib
from client_lib import trainq

POLL = 0.1  # seconds between status polls (ML Space's scripts use 10-60 s)
DEADLINE = 45.0  # longest wait for one event

BASE = dict(base_image="busybox", instance_type="a100.1gpu", allocation_name="t", type="binary")
TWO_GPUS = dict(base_image="busybox", instance_type="a100.2gpu", type="binary")

# The priorities page's request (../shared/seed/priorities.en.md), as written there.
PAGE = dict(base_image="cr.ai.cloud.ru/aicloud-base-images/py3.10-torch2.1.2:0.0.40", script="/home/jovyan/test_script.py",
            region="SR006", instance_type="a100plus.8gpu.80vG.96C.768G", n_workers=2, type="pytorch2",
            processes_per_worker=1, job_desc="medium-priority training job", priority_class="medium", max_retry=3)

DEPRECATED = ("cuda11", "forbid_internet", "forbid_s3", "in_communal_cluster", "preflight_check")


def setUpModule():
    missing = [v for v in ("TRAINQ_API_URL", "TRAINQ_API_TOKEN") if not os.environ.get(v)]
    if missing:
        raise unittest.SkipTest("set %s to run client_lib's e2e tests against a trainq API "
                                "(go test -run TestClientLib ./api/ does)" % " and ".join(missing))


def until(what, fn, timeout=DEADLINE, poll=POLL):
    """Polls fn until it returns something true, and returns that."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("waited %.0f s for %s" % (timeout, what))
        time.sleep(poll)


def wait_state(name, *states, timeout=DEADLINE):
    """Polls trainq.status until the job is in one of states; fails at once
    if it ends in another."""
    def check():
        st = trainq.status(name)
        if st.state in states:
            return st
        if st.terminal:
            raise AssertionError("%s ended %s (%s), want %s" % (name, st.state, st.message, "/".join(states)))
        return None
    return until("%s to be %s" % (name, "/".join(states)), check, timeout)


def wait_idle(allocation):
    """Waits until nothing waits, runs or is released in the allocation (jobs
    of earlier tests are stopped by their cleanups)."""
    until("allocation %s to be idle" % allocation, lambda: trainq.queue(allocation).idle)


def captured(fn, *a, **kw):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fn(*a, **kw)
    return buf.getvalue()


def word(s):
    """What ML Space's scripts do with a status string."""
    return s.split("=")[-1].strip().lower()


class E2E(unittest.TestCase):
    def submit(self, **kw):
        """Job(**kw).submit(), checked like the strict launcher does, and
        stopped when the test ends."""
        job = client_lib.Job(**kw)
        out = job.submit()
        self.assertEqual(out, 'Job "%s" created.' % job.job_name)
        self.assertTrue(job.job_name.startswith("lm-mpi-job-"), job.job_name)
        self.addCleanup(self._stop, job.job_name)
        return job

    def poll_until_done(self, kw, interval=0.5, deadline=DEADLINE):
        """Usage pattern 1 of mlspace-client-lib.md, as scripts write it:
        drop what Job does not take, submit, keep job.job_name, call
        get_job_status every interval and stop on a final word, then read
        the last 200 log lines."""
        params = inspect.signature(client_lib.Job).parameters
        job = client_lib.Job(**{k: v for k, v in kw.items() if k in params})
        print(job.submit(), file=sys.stderr)
        name = job.job_name
        self.addCleanup(self._stop, name)
        t_end = time.monotonic() + deadline
        while True:
            status = client_lib.get_job_status(name, region=kw.get("region")).split("=")[-1].strip().lower()
            if status in ("completed", "succeeded"):
                result = "ok"
                break
            if status in ("failed", "stopped", "deleted", "terminated"):
                result = "failed"
                break
            self.assertLess(time.monotonic(), t_end, "%s still %s" % (name, status))
            time.sleep(interval)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            client_lib.logs(name, tail=200, verbose=False)
        return result, buf.getvalue(), name

    @staticmethod
    def _stop(name):
        try:
            client_lib.kill(name)
        except client_lib.APIError:
            pass


class ClientLibE2E(E2E):
    """Today's API: the 16 RunJobRequest fields it accepts."""

    def test_priorities_page_request(self):
        wait_idle("default")
        job = self.submit(**PAGE)
        # The script does not exist here, so attempts fail and rerun; what
        # matters is that the request is taken as the page means it.
        st = until("the page's job to be scheduled", lambda: (lambda s: s if s.started else None)(trainq.status(job.job_name)))
        self.assertEqual((st.priority_class, st.type, st.region, st.allocation_name), ("medium", "pytorch2", "SR006", "default"))
        self.assertEqual((st.n_workers, st.gpu_count, st.max_retry, st.instance_type), (2, 16, 3, PAGE["instance_type"]))
        self.assertEqual(len(st.attempts[0].get("placement") or []), 2)
        self.assertIn(word(job.status()), {"pending", "starting", "running", "restarting", "failed"})
        self.assertIn(word(job.kill()), {"stopping", "stopped", "failed"})
        st = until("the page's job to end", lambda: (lambda s: s if s.terminal else None)(trainq.status(job.job_name)))
        self.assertIn(st.state, {"Stopped", "Failed"})

    def test_submit_status_logs_kill_jobs(self):
        # The YAML launcher's way: a binary job whose script is bash -c "cd <dir> && <command>".
        marker = "launcher-" + uuid.uuid4().hex[:8]
        done = self.submit(script='bash -c "cd /tmp && echo %s epoch-1 && echo %s epoch-2"' % (marker, marker),
                           job_desc=marker, **BASE)
        st = wait_state(done.job_name, "Completed")
        self.assertEqual(word(done.status()), "completed")
        self.assertEqual(word(client_lib.get_job_status(done.job_name, region="SR006")), "completed")
        self.assertIsNotNone(st.running_at)
        log = captured(client_lib.logs, done.job_name).splitlines()
        mine = [l for l in log if l.startswith(marker)]
        self.assertEqual(mine, ["%s epoch-1" % marker, "%s epoch-2" % marker])
        # tail=N: the last N lines of the worker's log (the supervisor's own lines included).
        self.assertEqual(captured(done.logs, tail=2).splitlines(), log[-2:])
        self.assertNotIn("epoch-1", "".join(log[-2:]))  # ... so the tail is shorter than the log

        running = self.submit(script="echo %s started; sleep 60" % marker, **BASE)
        wait_state(running.job_name, "Running")
        self.assertEqual(word(running.status()), "running")
        # Find the jobs again in jobs()'s printed lines, by a part of the name.
        part = running.job_name[len("lm-mpi-job-"):][:8]
        lines = [l.split(" : ") for l in captured(client_lib.jobs).splitlines()]
        self.assertTrue(all(len(l) == 3 for l in lines), lines[:3])
        found = [l for l in lines if part in l[1]]
        self.assertEqual([(l[1], l[2]) for l in found], [(running.job_name, "Running")])
        self.assertIsNotNone(trainq.parse_time(found[0][0]), found[0][0])
        self.assertIn((done.job_name, "Completed"), [(l[1], l[2]) for l in lines])

        self.assertIn(word(client_lib.kill(running.job_name)), {"stopping", "stopped"})
        wait_state(running.job_name, "Stopped")
        self.assertEqual(word(running.status()), "stopped")
        self.assertEqual(word(running.kill()), "stopped")  # idempotent
        rows = {r.job_name: r for r in trainq.jobs(allocation_name="t", limit=100)}
        self.assertEqual(rows[running.job_name].status, "Stopped")
        self.assertEqual(rows[done.job_name].job_desc, marker)

    def test_logs_follow_streams_while_the_job_runs(self):
        job = self.submit(script="for i in 1 2 3 4 5; do echo tick $i; sleep 0.5; done", **BASE)
        wait_state(job.job_name, "Running", "Completing", "Completed")
        lines, state_at_first = [], None
        for line in trainq.logs(job.job_name, follow=True):
            if state_at_first is None and line == "tick 1":
                state_at_first = trainq.status(job.job_name).state
            lines.append(line)
        self.assertEqual([l for l in lines if l.startswith("tick")], ["tick %d" % i for i in range(1, 6)])
        self.assertEqual(state_at_first, "Running")  # the first line came before the job ended
        self.assertEqual(trainq.status(job.job_name).state, "Completed")  # the stream ended with the job
        out = captured(client_lib.logs, job.job_name, follow=True)
        self.assertIn("tick 5\n", out)

    def test_high_overtakes_medium_in_the_queue(self):
        # The page's worked example on allocation q (one node of 2 GPUs):
        # a newer high job starts before an older medium one.
        wait_idle("q")
        filler = self.submit(script="echo filler; sleep 60", allocation_name="q", priority_class="high", **TWO_GPUS)
        wait_state(filler.job_name, "Running")
        medium = self.submit(script="echo medium ran", allocation_name="q", priority_class="medium", **TWO_GPUS)
        until("the medium job to wait first in line",
              lambda: (lambda s: s.state == "Pending" and s.position == 1 and s.reason)(trainq.status(medium.job_name)))
        self.assertEqual(word(medium.status()), "pending")
        high = self.submit(script="echo high ran; sleep 5", allocation_name="q", priority_class="high", **TWO_GPUS)
        until("the high job to go ahead of the medium one",
              lambda: trainq.status(high.job_name).position == 1 and trainq.status(medium.job_name).position == 2)
        self.assertEqual([w["job_name"] for w in trainq.queue("q").waiting], [high.job_name, medium.job_name])
        client_lib.kill(filler.job_name)
        # While the high job holds the node, the medium one waits (a busy
        # machine may only look once the high job has ended: then the start
        # times below still say who went first).
        if wait_state(high.job_name, "Running", "Completing", "Completed").state == "Running":
            self.assertEqual(trainq.status(medium.job_name).state, "Pending")
        h = wait_state(high.job_name, "Completed")
        m = wait_state(medium.job_name, "Completed")
        self.assertLess(h.running_at, m.running_at)
        self.assertIn("medium ran", captured(medium.logs))

    def test_high_preempts_running_medium(self):
        wait_idle("q")
        medium = self.submit(script="echo medium attempt; while true; do sleep 0.2; done", allocation_name="q",
                             priority_class="medium", max_retry=3, **TWO_GPUS)
        wait_state(medium.job_name, "Running")
        high = self.submit(script="echo high ran; sleep 1", allocation_name="q", priority_class="high", **TWO_GPUS)
        st = until("the medium job to name its preemptor", lambda: (lambda s: s if s.preemptors else None)(trainq.status(medium.job_name)))
        self.assertEqual((st.preemptor.name, st.preemptor.priority, st.preemptor.type), (high.job_name, "high", "job"))
        self.assertEqual([p.name for p in trainq.preemptors(medium.job_name)], [high.job_name])
        self.assertFalse(st.terminal)  # retries are left: it waits to run again
        wait_state(high.job_name, "Completed")
        st = wait_state(medium.job_name, "Running")
        self.assertEqual(st.attempt, 2)

    def test_bad_fields_are_refused_with_their_name(self):
        marker = "refused-" + uuid.uuid4().hex[:8]
        cases = [
            (dict(max_retry=1000), client_lib.ValidationError, 422, "max_retry"),
            (dict(n_workers="two"), client_lib.BadRequestError, 400, "n_workers"),
            (dict(health_params=client_lib.JobHealthParams(log_period=30, action="explode")), client_lib.ValidationError, 422, "health_params.action"),
            (dict(env_variables={"A": ["x"]}), client_lib.BadRequestError, 400, "env_variables"),
            (dict(base_image=None), client_lib.ValidationError, 422, "base_image"),
            # The test's token is team-a's: queue prod is team-b's, and queue shared allows shared classes only.
            (dict(queue_name="prod"), client_lib.ForbiddenError, 403, "queue_name"),
            (dict(queue_name="shared", priority_class="high"), client_lib.ForbiddenError, 403, "priority_class"),
            (dict(queue_name="night"), client_lib.ValidationError, 422, "queue_name"),
        ]
        for more, cls, status, field in cases:
            kw = dict(BASE, script="echo should not run", job_desc=marker)
            kw.update(more)
            with self.subTest(field=field):
                with self.assertRaises(cls) as cm:
                    client_lib.Job(**kw).submit()
                e = cm.exception
                self.assertEqual((e.status, e.field), (status, field), str(e))
                self.assertTrue(e.code and e.message, str(e))
                self.assertIn(field, str(e))
        # Nothing started: a job accepted after the refused ones is listed,
        # and it is the only one with their job_desc.
        ok = self.submit(script="true", job_desc=marker, **BASE)
        rows = until("the accepted job to be listed", lambda: (lambda rs: rs if ok.job_name in [r.job_name for r in rs] else None)(
            [r for r in trainq.jobs(allocation_name="t", limit=200) if r.job_desc == marker]))
        self.assertEqual([r.job_name for r in rows], [ok.job_name])

    def test_pattern_poll_until_done(self):
        kw = dict(base_image="busybox", script="echo poll-pattern-done", instance_type="a100.1gpu", type="binary",
                  n_workers=1, priority_class="medium", allocation_name="t", region="SR006")
        result, log, _ = self.poll_until_done(kw)
        self.assertEqual(result, "ok")
        self.assertIn("poll-pattern-done", log)
        result, log, name = self.poll_until_done(dict(kw, script="echo about to fail; exit 3"))
        self.assertEqual(result, "failed")
        self.assertIn("about to fail", log)
        self.assertEqual(trainq.status(name).state, "Failed")

    def test_pattern_bounded_pool(self):
        """Usage pattern 2: keep at most N jobs in flight, parse each job's
        status() every interval, refill as jobs complete, give up after
        several consecutive failures."""
        n, interval, max_consecutive_failures = 2, 0.5, 3
        scripts = ["echo pool-0; sleep 1", "echo pool-1; exit 1", "echo pool-2; sleep 1", "echo pool-3; sleep 0.5", "echo pool-4"]
        todo = list(enumerate(scripts))
        in_flight, finished, failures, consecutive, gave_up = {}, {}, 0, 0, False
        t_end = time.monotonic() + DEADLINE
        while (todo or in_flight) and not gave_up:
            while todo and len(in_flight) < n:
                i, script = todo.pop(0)
                job = client_lib.Job(script=script, **BASE)
                self.assertEqual(job.submit(), 'Job "%s" created.' % job.job_name)
                self.addCleanup(self._stop, job.job_name)
                in_flight[i] = job
            time.sleep(interval)
            for i, job in list(in_flight.items()):
                s = job.status().split("=")[-1].lower()
                if s in ("completed", "succeeded"):
                    consecutive = 0
                elif s in ("failed", "stopped", "deleted", "terminated"):
                    failures += 1
                    consecutive += 1
                    gave_up = consecutive >= max_consecutive_failures
                else:
                    continue
                finished[i] = (job.job_name, s)
                del in_flight[i]
            self.assertLess(time.monotonic(), t_end, "pool did not drain: %s" % in_flight)
        self.assertFalse(gave_up)
        self.assertEqual(sorted(finished), list(range(len(scripts))))
        self.assertEqual({i: s for i, (_, s) in finished.items()}, {0: "completed", 1: "failed", 2: "completed", 3: "completed", 4: "completed"})
        self.assertEqual(failures, 1)
        # The server's record: never more than n of the pool's jobs ran at once.
        spans = []
        for i, (name, _) in finished.items():
            st = trainq.status(name)
            self.assertIn("pool-%d" % i, captured(client_lib.logs, name))
            spans.append((st.running_at, st.completed_at))
        for start, _ in spans:
            self.assertLessEqual(sum(1 for s, e in spans if s <= start < e), n)

    def test_submit_to_running_time(self):
        """submit -> Running on an idle allocation (w), through client_lib and
        through the REST API by hand, polled alike: both get there, and the
        times are printed side by side. They are not compared: on a busy
        machine either can lose a second to the scheduler of the machine."""
        url, token = os.environ["TRAINQ_API_URL"].rstrip("/") + "/public/v2", os.environ["TRAINQ_API_TOKEN"]

        def rest(method, path, body=None):
            req = urllib.request.Request(url + path, method=method, data=json.dumps(body).encode() if body else None,
                                         headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())

        body = dict(TWO_GPUS, script="sleep 60", allocation_name="w")
        times = {"client_lib": [], "REST": []}
        for _ in range(2):
            for how in ("client_lib", "REST"):
                wait_idle("w")
                t0 = time.monotonic()
                if how == "client_lib":
                    job = client_lib.Job(**body)
                    job.submit()
                    name = job.job_name
                    self.addCleanup(self._stop, name)
                    until("Running", lambda: trainq.status(name).state == "Running", poll=0.02)
                else:
                    name = rest("POST", "/jobs", body)["job_name"]
                    self.addCleanup(self._stop, name)
                    until("Running", lambda: rest("GET", "/jobs/" + name)["status"] == "Running", poll=0.02)
                times[how].append(time.monotonic() - t0)
                client_lib.kill(name)
        med = {k: statistics.median(v) for k, v in times.items()}
        print("\nsubmit -> Running on idle allocation w: client_lib %s s (median %.3f), REST %s s (median %.3f)" % (
            ["%.3f" % t for t in times["client_lib"]], med["client_lib"], ["%.3f" % t for t in times["REST"]], med["REST"]),
            file=sys.stderr)


_probe = []


def new_fields_missing():
    """Why the API does not take all 33 fields yet ("" when it does). Asks
    with every field and n_workers=0, which no API accepts: the answer names
    an unknown field while the new fields are missing, a bad value once they
    are there. Nothing is started either way."""
    if not _probe:
        _probe.append(_probe_new_fields())
    return _probe[0]


def _probe_new_fields():
    if not os.environ.get("TRAINQ_API_URL") or not os.environ.get("TRAINQ_API_TOKEN"):
        return "no API configured"
    body = {"script": "true", "base_image": "busybox", "instance_type": "a100.1gpu", "allocation_name": "t", "type": "binary",
            "n_workers": 0, "processes_per_worker": "default", "job_desc": "probe", "internet": False, "conda_env": "base",
            "max_retry": 3, "priority_class": "medium", "queue_name": "default", "region": "SR006", "checkpoint_dir": "ckpt",
            "logs_dir": "logs", "health_params": {"log_period": 30, "action": "restart"}, "shm_size_class": "medium",
            "flags": {}, "env_variables": {}, "pytorch_use_env": False, "elastic_min_workers": "default",
            "elastic_max_workers": "default", "elastic_max_restarts": 5, "include_nodes": [], "exclude_nodes": [],
            "tmp_storage": "", "stop_timer": 0, "cuda11": False, "preflight_check": False, "forbid_internet": False,
            "forbid_s3": False, "in_communal_cluster": False}
    assert len(body) == 33
    try:
        client_lib.Client.from_env().call("POST", "/jobs", body=body)
    except client_lib.BadRequestError as e:
        if e.code == "unknown_field":
            return "the API refuses %s as an unknown field (the 33-field API has not landed): %s" % (e.field, e.message)
    except client_lib.APIError:
        pass
    return ""


@unittest.skipIf(new_fields_missing(), new_fields_missing())
class NewRunJobFieldsE2E(E2E):
    """The API that accepts all 33 RunJobRequest fields."""

    def test_every_deprecated_field_is_accepted_with_a_warning(self):
        for f in DEPRECATED:
            with self.subTest(field=f):
                job = self.submit(script="true", **dict(BASE, **{f: True}))
                self.assertTrue(any(f in w for w in job.warnings), job.warnings)
                st = trainq.status(job.job_name)
                self.assertTrue(any(f in w for w in st.warnings), st.warnings)

    def test_pattern_poll_until_done_exactly(self):
        # Pattern 1 with the fields the scripts send: internet and shm_size_class.
        kw = dict(base_image="busybox", script="echo poll-pattern-exact", instance_type="a100.1gpu", type="binary",
                  n_workers=1, internet=True, shm_size_class="large", priority_class="medium", allocation_name="t")
        result, log, _ = self.poll_until_done(kw)
        self.assertEqual(result, "ok")
        self.assertIn("poll-pattern-exact", log)

    def test_pattern_strict_launcher_shared_queue(self):
        # Pattern 4: submit() must return exactly the created line; the shared queue, shared-medium.
        job = client_lib.Job(script="echo strict", queue_name="shared", priority_class="shared-medium", **BASE)
        out = job.submit()
        self.addCleanup(self._stop, job.job_name)
        self.assertEqual(out, 'Job "%s" created.' % job.job_name)
        st = wait_state(job.job_name, "Completed")
        # In the allocation's shared queue, shared-medium runs as medium and a warning says so.
        self.assertIn(st.priority_class, ("shared-medium", "medium"))
        if st.priority_class == "medium":
            self.assertTrue(any("shared-medium" in w for w in job.warnings), job.warnings)
            self.assertTrue(any("shared-medium" in w for w in st.warnings), st.warnings)


if __name__ == "__main__":
    unittest.main()
