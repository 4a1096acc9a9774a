#!/usr/bin/env python3
"""Mutation check of a running attempt's rule tables (package attempts).

Each mutation removes one rule's condition; the tables must fail for every
one. Run from the repository root: python3 scripts/attempts-mutations.py
It restores every file it touches, and exits 1 if a mutation survives.
With --check it only makes sure every mutation still finds its condition
(make lint runs that, so that the list cannot go stale unnoticed).
"""
import subprocess, sys

R, O, A, S = 'attempts/running.go', 'attempts/outcome.go', 'attempts/after.go', 'attempts/start.go'
# (file, text, replacement, which occurrence: 1 = the first)
muts = [
    (R, 'if d == 0 {', 'if false {', 1),
    (R, 'if d <= 0 || r.Deadline != nil {', 'if d <= 0 {', 1),
    (R, 'if r.noticeStops() && r.Decided {', 'if false {', 1),
    (R, 'if p.Drain != "" {', 'if false {', 1),
    (R, 'if p.Notice > 0 {', 'if false {', 1),
    (R, 'case p.Loan:', 'case false:', 1),
    (R, 'case p.Move:', 'case false:', 1),
    (R, 'if p.Notice > 0 {', 'if false {', 2),
    (R, 'if !r.noticeStops() {\n\t\treturn nil\n\t}\n\tr.Done = false\n\treturn r.notice(now, protocol.NoticeReasonCancelled', 'if false {\n\t\treturn nil\n\t}\n\tr.Done = false\n\treturn r.notice(now, protocol.NoticeReasonCancelled', 1),
    (R, 'if r.noticeStops() && r.Decided {', 'if false {', 2),
    (R, ', r.Out.Kind == Failed && !r.Out.Final:', ':', 1),
    (R, ', r.Out.Kind == Yielded,', ',', 1),
    (R, ', r.Out.Kind == NodeDrained,', ',', 1),
    (R, 'r.Out.Kind == Failed && !r.Out.Final:', 'r.Out.Kind == Failed:', 1),
    (R, 'if r.noticeStops() && r.Decided {', 'if r.Decided {', 1),
    (R, 'if r.noticeStops() && r.Decided {', 'if r.Decided {', 2),
    (R, 'if !r.noticeStops() {\n\t\treturn nil\n\t}\n\tr.Done = false\n\treturn r.notice(now, protocol.NoticeReasonTimeLimit', 'if false {\n\t\treturn nil\n\t}\n\tr.Done = false\n\treturn r.notice(now, protocol.NoticeReasonTimeLimit', 1),
    (R, 'if !r.Decided {', 'if true {', 1),
    (R, 'if r.Deadline != nil {\n\t\t\tif r.allExited() {', 'if false {\n\t\t\tif r.allExited() {', 1),
    (R, '\t\t\tif r.allExited() {', '\t\t\tif true {', 1),
    (R, 'if r.Deadline != nil && w.End == Silent {', 'if false {', 1),
    (R, 'case r.noticeStops() && w.End == Silent && r.Deadline == nil && !r.Decided:', 'case false:', 1),
    (R, 'case w.End != WorkerGone && w.Cancelled:', 'case false:', 1),
    (R, 'case w.End != WorkerGone && w.Cancelled:', 'case w.Cancelled:', 1),
    (R, 'if r.Health != nil && r.Health.Notify {', 'if r.Health != nil {', 1),
    (R, 'case w.Code != 0:', 'case false:', 1),
    (R, 'if w.Reason != "" {', 'if false {', 1),
    (R, 'case r.allExited():', 'case true:', 1),
    (R, 'if h.Action == protocol.HealthActionDelete {', 'if false {', 1),
    (O, 'return r.NodeLosses < MaxNodeLossReruns', 'return true', 1),
    (O, 'return !out.Final && r.Restarts < r.MaxRetry', 'return r.Restarts < r.MaxRetry', 1),
    (O, 'case NodeDrained, Yielded:\n\t\treturn true', 'case NodeDrained:\n\t\treturn true', 1),
    (A, '\t\tif rerun {\n', '\t\tif true {\n', 1),
    (A, '\tif !rerun {\n', '\tif false {\n', 1),
    (A, 'if out.Kind == Preempted {', 'if false {', 1),
    (A, 'if !out.Final {', 'if true {', 1),
    (A, 'case out.Kind == Preempted:', 'case false:', 1),
    (A, 'case out.Stuck:', 'case false:', 1),
    (S, 'if failure == nil || (o.Kind == NodeLost && failure.Kind != NodeLost) {', 'if failure == nil {', 1),
    (S, 'if failure == nil || (o.Kind == NodeLost && failure.Kind != NodeLost) {', 'if failure == nil || o.Kind == NodeLost {', 1),
    (S, 'lost, busy = append(lost, r.Node), append(busy, r.Node)', 'lost = append(lost, r.Node)', 1),
    (S, '\t\t\tlost = append(lost, r.Node)\n\t\tcase StartGPUsBusy:', '\t\tcase StartGPUsBusy:', 1),
]

def replace_nth(src, a, b, n):
    at = -1
    for _ in range(n):
        at = src.index(a, at + 1)
    return src[:at] + b + src[at + len(a):]

if '--check' in sys.argv[1:]:
    stale = [(f, a, n) for f, a, b, n in muts if open(f).read().count(a) < n]
    for f, a, n in stale:
        print(f'stale mutation: {f} has no occurrence {n} of {a!r}')
    sys.exit(1 if stale else 0)

survived = 0
for f, a, b, n in muts:
    src = open(f).read()
    assert src.count(a) >= n, (f, a, n)
    open(f, 'w').write(replace_nth(src, a, b, n))
    try:
        r = subprocess.run(['go', 'test', '-count=1', './attempts/'], capture_output=True, text=True)
    finally:
        open(f, 'w').write(src)
    fails = [l.strip() for l in r.stdout.splitlines() if l.strip().startswith('--- FAIL') and '/' in l]
    print('KILLED' if r.returncode else 'SURVIVED', f, a.strip().replace('\n', ' ')[:70], n, fails[:2])
    survived += r.returncode == 0
sys.exit(1 if survived else 0)
