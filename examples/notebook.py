#!/usr/bin/env python3
# %% [markdown]
# # The priorities page's job, through client_lib
#
# A notebook (cells marked `# %%`; it also runs as a script) that submits the
# request of ML Space's priorities page through `client_lib.Job(...)` and
# watches the medium-priority job overtake a lower-class one: a `low` job
# holds every node of the allocation, the page's `medium` job arrives,
# preempts it, runs, and the low job (it has `max_retry` left) runs again.
#
#     make dev          # prints TRAINQ_API_URL's address and a token
#     export TRAINQ_API_URL=http://127.0.0.1:8080 TRAINQ_API_TOKEN=tq_...
#     PYTHONPATH=python/client_lib python3 examples/notebook.py
#
# Only client_lib (python/client_lib, standard library only) is needed.

# %%
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "client_lib"))
import client_lib  # noqa: E402
from client_lib import trainq  # noqa: E402

ap = argparse.ArgumentParser(description="client_lib: the priorities page's job overtakes a low one")
ap.add_argument("--allocation", default="default", help="an allocation with a100plus.8gpu nodes (config/default.yaml's default)")
ap.add_argument("--region", default=os.environ.get("TRAINQ_REGION", "SR006"))
ap.add_argument("--timeout", type=float, default=120, help="seconds to watch at most")
args, _ = ap.parse_known_args()

# %% [markdown]
# The page's request, field for field. Its script, `/home/jovyan/test_script.py`,
# is on ML Space's notebook disk; here a stand-in of the same shape is
# written to a temporary directory (trainq's local backend runs
# `python3 <script>` once per process on this machine).

# %%
PAGE = dict(
    base_image="cr.ai.cloud.ru/aicloud-base-images/py3.10-torch2.1.2:0.0.40",
    script="/home/jovyan/test_script.py",
    region="SR006",
    instance_type="a100plus.8gpu.80vG.96C.768G",
    n_workers=2,
    type="pytorch2",
    processes_per_worker=1,
    job_desc="medium-priority training job",
    priority_class="medium",
    max_retry=3,
)
stand_in = os.path.join(tempfile.mkdtemp(prefix="trainq-notebook-"), "test_script.py")
with open(stand_in, "w") as f:
    f.write("import os, time\n"
            "rank = os.environ.get('RANK', os.environ.get('TRAINQ_WORKER', '?'))\n"
            "for epoch in range(1, 6):\n"
            "    print('worker', rank, 'epoch', epoch, flush=True)\n"
            "    time.sleep(1)\n")
page_request = dict(PAGE, script=stand_in, region=args.region, allocation_name=args.allocation)

# %% [markdown]
# A low-priority job on every node that fits the page's instance type.

# %%
family, gpus = PAGE["instance_type"].split(".")[0], int(PAGE["instance_type"].split(".")[1].rstrip("gpu"))
fits = [it for it in trainq.instance_types(region=args.region, allocation_name=args.allocation)
        if it["family"] == family and it["gpus"] == gpus]
if not fits or fits[0]["max_workers"] < PAGE["n_workers"]:
    sys.exit("allocation %s has no room for %d workers of %s; pass --allocation" % (args.allocation, PAGE["n_workers"], PAGE["instance_type"]))
nodes = fits[0]["max_workers"]
low = client_lib.Job(script="echo low-priority job started; while true; do sleep 1; done", base_image="busybox",
                     instance_type=PAGE["instance_type"], n_workers=nodes, type="binary", region=args.region,
                     allocation_name=args.allocation, priority_class="low", max_retry=3, job_desc="low-priority filler")
print(low.submit())
deadline = time.monotonic() + args.timeout
while trainq.status(low.job_name).state != "Running":
    if time.monotonic() > deadline:
        sys.exit("the low job did not start: %s" % low.status())
    time.sleep(0.5)
print("low job runs on all %d nodes:" % nodes, low.status())

# %% [markdown]
# The page's job. Medium ranks above low, so it may preempt the low job
# (rule 6 of the page); the low job is re-queued because it has retries left.

# %%
page = client_lib.Job(**page_request)
print(page.submit())
seen = None
overtook = False
try:
    while time.monotonic() < deadline:
        p, l = trainq.status(page.job_name), trainq.status(low.job_name)
        line = "page job: %-10s | low job: %-10s attempt %d" % (p.state, l.state, l.attempt)
        if p.state == "Pending" and p.reason:
            line += " | page waits: " + p.reason
        if l.preemptor:
            line += " | low preempted by %s job %s" % (l.preemptor.priority, l.preemptor.name)
        if line != seen:
            print(line)
            seen = line
        if p.state == "Running" and l.preemptor and l.preemptor.name == page.job_name and not overtook:
            overtook = True
            print("\nThe medium job overtook the low one:", page.status())
            print("                                      ", low.status())
            print("\nThe page's job's log, as it runs:")
            client_lib.logs(page.job_name, follow=True)
            print()
        if overtook and p.terminal and l.state == "Running":
            print("The page's job ended (%s); the low job runs again, attempt %d." % (p.state, l.attempt))
            break
        time.sleep(0.5)
finally:
    # %% Clean up: stop both jobs.
    for job in (page, low):
        print(job.kill())
sys.exit(0 if overtook else 1)
