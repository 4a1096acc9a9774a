#!/usr/bin/env python3
"""A PyTorch-shaped training loop that saves a checkpoint when trainq gives it
a preemption notice, exits, and resumes from that checkpoint on its rerun.

Standard library only, so that it runs anywhere; the places where a real
script calls torch are marked. Submit it to an allocation with
`preemption_notice` set (docs/operating.md, "Preemption notice: a worked example"):

    bin/trainq submit --type pytorch2 --script examples/train_on_notice.py \\
      --allocation demo --instance-type a100.2gpu --priority-class low --max-retry 3

What it does, in the order a real training script would:

- on start, loads $TRAINQ_CHECKPOINT_DIR/checkpoint.json if there is one
  (trainq keeps that directory across the job's attempts) and prints
  "resumed at step N";
- trains epochs x steps, saving a checkpoint every --checkpoint-every steps
  and telling trainq about it (`trainq checkpoint`), so that a preemption
  loses little work and the job makes a cheaper victim;
- before every step, looks for a notice ($TRAINQ_NOTICE_FILE, through
  client_lib.preemption_notice() when python/client_lib is importable); on
  one it saves, reports the checkpoint, prints the reason and the deadline,
  and exits 0 long before the deadline, so the preemptor starts at once and
  the attempt counts as a preemption (the job reruns while max_retry allows);
- on SIGTERM (a notice it missed, a cancel, an allocation without notices)
  it saves after the current step as a last chance, and exits.

Options (also as job flags, `trainq submit --flag steps-per-epoch=50`, or environment
variables): --epochs (TRAIN_EPOCHS, 3), --steps-per-epoch
(TRAIN_STEPS_PER_EPOCH, 100), --step-seconds (TRAIN_STEP_SECONDS, 0.1: how
long a step "computes"), --checkpoint-every (TRAIN_CHECKPOINT_EVERY, 100;
0: only on a notice, a SIGTERM and at the end).
"""
import argparse
import datetime
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

try:
    import client_lib  # python/client_lib: trainq's helpers, if installed (pip install ./python/client_lib)
except ImportError:
    client_lib = None

CHECKPOINT_FILE = "checkpoint.json"

# trainq starts processes_per_worker processes per worker (by default one per
# GPU), each with its RANK. As with DDP, rank 0 saves and prints; every rank
# reads the notice and exits. (With real DDP, have the ranks agree on the step
# to stop at, e.g. all_reduce a stop flag, so that no collective op hangs.)
RANK0 = os.environ.get("RANK", "0") == "0"


def log(msg):
    if RANK0:
        print(msg)


# --- the model and its optimizer --------------------------------------------
# A real script has `model = Net().to(device)` and `optimizer = torch.optim.SGD(...)`;
# here both are plain dicts (what their state_dict() would be), fitting y = 3x + 2.

def new_model():
    return {"w": 0.0, "b": 0.0}


def new_optimizer():
    return {"lr": 0.05, "momentum": 0.9, "velocity": {"w": 0.0, "b": 0.0}}


def train_step(model, optimizer, step, step_seconds):
    """One forward/backward/optimizer.step() on a batch; returns the loss.
    The batch depends only on the step, so a resumed run sees the same data."""
    rng = random.Random(step)
    batch = [(x, 3.0 * x + 2.0 + rng.gauss(0, 0.1)) for x in (rng.uniform(-1, 1) for _ in range(32))]
    grad_w = grad_b = loss = 0.0
    for x, y in batch:
        err = model["w"] * x + model["b"] - y
        loss += err * err / len(batch)
        grad_w += 2 * err * x / len(batch)
        grad_b += 2 * err / len(batch)
    v = optimizer["velocity"]
    v["w"] = optimizer["momentum"] * v["w"] + grad_w
    v["b"] = optimizer["momentum"] * v["b"] + grad_b
    model["w"] -= optimizer["lr"] * v["w"]
    model["b"] -= optimizer["lr"] * v["b"]
    time.sleep(step_seconds)  # the GPU's share of the step
    return loss


# --- checkpoints ----------------------------------------------------------------

def checkpoint_dir():
    return os.environ.get("TRAINQ_CHECKPOINT_DIR") or os.path.abspath("checkpoints")


def save_checkpoint(model, optimizer, step, why):
    """Writes the checkpoint atomically (a temporary file, then os.replace),
    as torch.save(state, tmp); os.replace(tmp, path) would: a worker killed
    mid-write leaves the previous checkpoint whole."""
    d = checkpoint_dir()
    os.makedirs(d, exist_ok=True)
    state = {
        "step": step,
        "model": model,
        "optimizer": optimizer,
        "why": why,
        "attempt": int(os.environ.get("TRAINQ_ATTEMPT", "0")),
        "saved_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    }
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".checkpoint-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(d, CHECKPOINT_FILE))
    except BaseException:
        os.unlink(tmp)
        raise
    return os.path.join(d, CHECKPOINT_FILE)


def load_checkpoint():
    """The saved state, or None when there is no checkpoint yet (the first attempt)."""
    try:
        with open(os.path.join(checkpoint_dir(), CHECKPOINT_FILE)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def trainq_cli():
    """The trainq CLI, for `trainq checkpoint`: $TRAINQ_CLI, `trainq` on PATH,
    or bin/trainq of the repository this example is in."""
    repo_bin = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bin", "trainq")
    for c in (os.environ.get("TRAINQ_CLI"), shutil.which("trainq"), repo_bin):
        if c and os.access(c, os.X_OK):
            return c
    return None


def report_checkpoint():
    """Tells trainq a checkpoint was just saved: a preemption from now on
    loses only the work done since (the job and attempt come from the
    worker's $TRAINQ_JOB_NAME and $TRAINQ_ATTEMPT). Never fatal."""
    cli = trainq_cli()
    if cli is None or not os.environ.get("TRAINQ_JOB_NAME"):
        return
    try:
        r = subprocess.run([cli, "checkpoint"], capture_output=True, text=True, timeout=10)
        log("  trainq checkpoint: " + (r.stdout or r.stderr).strip())
    except (OSError, subprocess.TimeoutExpired) as e:
        log("  trainq checkpoint failed: %s" % e)


# --- the notice ---------------------------------------------------------------

def parse_time(s):
    """An RFC 3339 time as Go writes it (up to nanoseconds, "Z")."""
    base, frac, zone = re.match(r"(\S+T\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", s).groups()
    frac = (frac or ".0")[1:7].ljust(6, "0")
    return datetime.datetime.fromisoformat("%s.%s%s" % (base, frac, "+00:00" if zone == "Z" else zone))


def preemption_notice():
    """The worker's stop notice as a dict (reason, by, deadline as a datetime,
    job, attempt), or None while there is none. trainq writes the file named
    by $TRAINQ_NOTICE_FILE whole, at once, when it is to stop the worker."""
    path = os.environ.get("TRAINQ_NOTICE_FILE")
    if not path:
        return None  # not run by trainq
    if client_lib is not None:
        return client_lib.preemption_notice()
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    if not text.strip():
        return None  # on Kubernetes the file is empty until the notice is set
    notice = json.loads(text)
    notice["deadline"] = parse_time(notice["deadline"])
    return notice


def utc(t):
    """t as RFC 3339 in UTC, to the microsecond."""
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --- the loop -------------------------------------------------------------------

def env_default(name, default, kind):
    return kind(os.environ.get(name, default))


def main():
    ap = argparse.ArgumentParser(description="A training loop that saves on trainq's preemption notice and resumes.")
    ap.add_argument("--epochs", type=int, default=env_default("TRAIN_EPOCHS", 3, int))
    ap.add_argument("--steps-per-epoch", type=int, default=env_default("TRAIN_STEPS_PER_EPOCH", 100, int))
    ap.add_argument("--step-seconds", type=float, default=env_default("TRAIN_STEP_SECONDS", 0.1, float))
    ap.add_argument("--checkpoint-every", type=int, default=env_default("TRAIN_CHECKPOINT_EVERY", 100, int))
    args = ap.parse_args()
    total = args.epochs * args.steps_per_epoch

    sigterm = []  # a handler only notes the signal: the loop saves after the current step
    signal.signal(signal.SIGTERM, lambda signum, frame: sigterm.append(signum))

    if os.environ.get("TRAINQ_NOTICE_FILE"):
        log("watching for a notice at $TRAINQ_NOTICE_FILE with %s"
            % ("client_lib.preemption_notice()" if client_lib is not None else "the standard library"))
    model, optimizer, step = new_model(), new_optimizer(), 0
    state = load_checkpoint()
    if state is None:
        log("attempt %s: starting from scratch, %d steps to go" % (os.environ.get("TRAINQ_ATTEMPT", "-"), total))
    else:
        # model.load_state_dict(state["model"]); optimizer.load_state_dict(state["optimizer"])
        model, optimizer, step = state["model"], state["optimizer"], state["step"]
        log("attempt %s: resumed at step %d (saved by attempt %s on %s)"
            % (os.environ.get("TRAINQ_ATTEMPT", "-"), step, state["attempt"], state["why"]))

    def save(why):
        if RANK0:
            path = save_checkpoint(model, optimizer, step, why)
            log("saved checkpoint at step %d (%s) to %s" % (step, why, path))
            report_checkpoint()

    while step < total:
        notice = preemption_notice()
        if notice is not None:
            by = notice.get("by") or {}
            left = (notice["deadline"] - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
            log("notice: %s by a %s %s, deadline %s (%.1fs left)"
                % (notice["reason"], by.get("class", "?"), by.get("kind", "?"), utc(notice["deadline"]), left))
            save("notice")
            left = (notice["deadline"] - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
            log("exiting at step %d, %.1fs before the deadline; the rerun resumes here" % (step, left))
            return 0
        if sigterm:
            log("SIGTERM at step %d: saving as a last chance" % step)
            save("SIGTERM")
            return 0
        loss = train_step(model, optimizer, step, args.step_seconds)
        step += 1
        if step % args.steps_per_epoch == 0 or step == 1:
            log("epoch %d/%d step %d/%d loss %.4f w %.3f b %.3f"
                % ((step - 1) // args.steps_per_epoch + 1, args.epochs, step, total, loss, model["w"], model["b"]))
        if args.checkpoint_every and step % args.checkpoint_every == 0 and step < total:
            save("every %d steps" % args.checkpoint_every)
    save("done")
    log("training done at step %d: w %.3f b %.3f" % (step, model["w"], model["b"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
