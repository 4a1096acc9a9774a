#!/usr/bin/env python3
"""Submit a job to trainq's REST API, poll it until it ends, print its logs.

Only the standard library is used, as in an ML Space user's script:

    export TRAINQ_API_URL=http://127.0.0.1:8080   # make dev prints both
    export TRAINQ_API_TOKEN=tq_...
    python3 examples/client.py --script 'echo hello' --instance-type a100.1gpu --allocation demo
"""
import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid

TERMINAL = {"Completed", "Failed", "Stopped", "Preempted"}


class APIError(Exception):
    pass


def request(base, token, method, path, body=None, headers=None, retries=5):
    """One API call; retries 503 and 429 as Retry-After says. Returns (status, body bytes)."""
    data = json.dumps(body).encode() if body is not None else None
    hdrs = {"Authorization": "Bearer " + token}
    if data is not None:
        hdrs["Content-Type"] = "application/json"
    hdrs.update(headers or {})
    for attempt in range(retries + 1):
        req = urllib.request.Request(base + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            payload = e.read()
            if e.code in (429, 503) and attempt < retries:
                time.sleep(int(e.headers.get("Retry-After", "1")))
                continue
            try:
                err = json.loads(payload)["error"]
                msg = "%s: %s" % (err.get("code"), err.get("message"))
                if err.get("field"):
                    msg += " (field %s)" % err["field"]
            except (ValueError, KeyError, TypeError):
                msg = payload.decode(errors="replace")
            raise APIError("%s %s -> %d %s" % (method, path, e.code, msg))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("TRAINQ_API_URL", "http://127.0.0.1:8080"))
    ap.add_argument("--token", default=os.environ.get("TRAINQ_API_TOKEN"))
    ap.add_argument("--script", default="echo hello from trainq; sleep 2; echo done")
    ap.add_argument("--instance-type", default="a100.1gpu")
    ap.add_argument("--allocation", default="demo")
    ap.add_argument("--region", default=None)
    ap.add_argument("--priority-class", default="medium")
    args = ap.parse_args()
    if not args.token:
        sys.exit("set TRAINQ_API_TOKEN (make dev prints one) or pass --token")

    job = {
        "script": args.script,
        "base_image": "cr.ai.cloud.ru/aicloud-base-images/py3.10-torch2.1.2:0.0.40",
        "instance_type": args.instance_type,
        "allocation_name": args.allocation,
        "n_workers": 1,
        "type": "binary",
        "processes_per_worker": "default",
        "job_desc": "submitted by examples/client.py",
        "priority_class": args.priority_class,
        "max_retry": 3,
    }
    if args.region:
        job["region"] = args.region
    # The key makes the POST safe to retry: a retry gets the same job_name.
    key = str(uuid.uuid4())
    _, body = request(args.url, args.token, "POST", "/public/v2/jobs", job, {"Idempotency-Key": key})
    sub = json.loads(body)
    name = sub["job_name"]
    print("submitted %s (%s)" % (name, sub["status"]))

    last = None
    while True:
        _, body = request(args.url, args.token, "GET", "/public/v2/jobs/" + name)
        st = json.loads(body)
        line = st["status"]
        if st["status"] == "Pending" and st.get("reason"):
            line += " #%s: %s" % (st.get("position"), st["reason"])
        if line != last:
            print("status: " + line)
            last = line
        if st["status"] in TERMINAL:
            break
        time.sleep(1)
    for p in st.get("preemptors") or []:
        print("preempted by %s (%s %s)" % (p["name"], p["priority"], p["type"]))

    _, logs = request(args.url, args.token, "GET", "/public/v2/jobs/%s/logs?tail=100" % name)
    print("--- logs ---")
    sys.stdout.write(logs.decode(errors="replace"))
    print("--- job %s ended %s ---" % (name, st["status"]))
    return 0 if st["status"] == "Completed" else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except APIError as e:
        sys.exit(str(e))
