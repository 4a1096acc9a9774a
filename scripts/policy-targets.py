#!/usr/bin/env python3
"""Checks scheduling policies against the policy targets on a grid of pools.

For every cell (pod list x pool size x estimate model) it runs one `trainq simulate` with fifo,
best-effort and the policies given, and says which targets each policy meets there:

  T1  no class's longest wait above 2x FIFO's longest for that class (10 minutes of slack)
  T2  the 4+-GPU p95 wait no worse than FIFO's
  T3  lost GPU-hours (preemptions and yields) under 1 % of useful, at most 3 preemptions of
      one job, no preemption for nothing
  T4  the high class's p95 wait at most 2 minutes above best-effort's

Usage:
  scripts/policy-targets.py [--trace DIR] [--cells default:9-12,multigpu50:13-18]
      [--estimates learned,limit:2x] [--json FILE] POLICY...
where POLICY is what `trainq simulate --policy` takes (name:knob=value,...).
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_cells(text):
    cells = []
    for part in text.split(","):
        pods, sizes = part.split(":")
        lo, _, hi = sizes.partition("-")
        for n in range(int(lo), int(hi or lo) + 1):
            cells.append((pods, n))
    return cells


def rows_of(result):
    return {r["name"]: r for r in result["rows"]}


def judge(res, fifo, best):
    rows, f, b = rows_of(res), rows_of(fifo), rows_of(best)
    t1 = all(
        rows[c]["wait_max"] <= 2 * f[c]["wait_max"] + 600
        for c in ("high", "medium", "low")
        if c in rows and c in f
    )
    big = "4+ GPUs"
    t2 = big not in rows or rows[big]["wait_p95"] <= f[big]["wait_p95"]
    total = rows["all"]
    t3 = (
        total["lost_pct"] < 1
        and total["max_preemptions_of_one_job"] <= 3
        and total["preemptions_for_nothing"] == 0
    )
    t4 = "high" not in rows or rows["high"]["wait_p95"] <= b["high"]["wait_p95"] + 120
    return [t1, t2, t3, t4]


def hours(s):
    return s / 3600


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=os.path.join(ROOT, "..", "shared", "traces", "alibaba-gpu-v2023"))
    ap.add_argument("--cells", default="default:9-12,multigpu50:13-18")
    ap.add_argument("--estimates", default="learned,limit:2x")
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin", "trainq"))
    ap.add_argument("--json", help="write every cell's figures here")
    ap.add_argument("--verbose", action="store_true", help="print each cell's figures")
    ap.add_argument("policies", nargs="+")
    args = ap.parse_args()

    names = [p.split(":")[0] for p in args.policies]
    met = {n: [0, 0, 0, 0, 0] for n in ["best-effort"] + names}
    cells = 0
    record = []
    for pods, n in parse_cells(args.cells):
        for est in args.estimates.split(","):
            cmd = [args.bin, "simulate", "--trace", args.trace, "--pods", pods, "--nodes", str(n),
                   "--estimates", est, "--policy", "fifo", "--policy", "best-effort", "--output", "json"]
            for p in args.policies:
                cmd += ["--policy", p]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            results = json.loads(out)["results"]
            by = {r["policy"]["name"]: r for r in results}
            fifo, best = by["fifo"], by["best-effort"]
            cells += 1
            line = [f"{pods}/{n} {est}"]
            for name in ["best-effort"] + names:
                verdict = judge(by[name], fifo, best)
                for i, ok in enumerate(verdict):
                    met[name][i] += ok
                met[name][4] += all(verdict)
                rows = rows_of(by[name])
                line.append("%s %s hi-max %.1fh med-max %.1fh 4+p95 %.1fh hi-p95 %.2fh lost %.2f%%" % (
                    name, "".join("✓" if ok else "✗" for ok in verdict),
                    hours(rows.get("high", {}).get("wait_max", 0)), hours(rows.get("medium", {}).get("wait_max", 0)),
                    hours(rows.get("4+ GPUs", {}).get("wait_p95", 0)), hours(rows.get("high", {}).get("wait_p95", 0)),
                    rows["all"]["lost_pct"]))
                record.append({"cell": f"{pods}/{n}", "estimates": est, "policy": name, "targets": verdict,
                               "rows": rows, "loans": by[name].get("loans"), "yields": by[name].get("yields")})
            frows = rows_of(fifo)
            line.append("fifo hi-max %.1fh med-max %.1fh 4+p95 %.1fh" % (
                hours(frows.get("high", {}).get("wait_max", 0)), hours(frows.get("medium", {}).get("wait_max", 0)),
                hours(frows.get("4+ GPUs", {}).get("wait_p95", 0))))
            if args.verbose:
                print("\n  ".join(line), flush=True)
            else:
                print(".", end="", file=sys.stderr, flush=True)
    if not args.verbose:
        print(file=sys.stderr)
    print(f"| policy | T1 longest <= 2x FIFO | T2 4+ p95 <= FIFO | T3 lost < 1 % | T4 high p95 <= best-effort + 2m | all four |")
    print("|---|--:|--:|--:|--:|--:|")
    for name, m in met.items():
        print(f"| {name} | " + " | ".join(f"{x}/{cells}" for x in m) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
