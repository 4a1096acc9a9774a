#!/usr/bin/env python3
"""Mutation check of the allocator's rule tables (package allocation).

Each mutation removes one rule's condition; the tables must fail for every
one. Run from the repository root: python3 scripts/allocation-mutations.py
It restores every file it touches, and exits 1 if a mutation survives.
With --check it only makes sure every mutation still finds its condition
(make lint runs that, so that the list cannot go stale unnoticed).
"""
import subprocess,sys
muts=[
('allocation/requests.go','\ts.rememberWithdrawal(w)\n','\t_ = w\n'),
('allocation/requests.go','|| r.Releasing ','' ),
('allocation/fences.go','&& s.Fences[node].Cause != FenceRecovering ',''),
('allocation/fences.go','if stillHeld(keep, s.WorkersOn(node)) {','if true {'),
('allocation/reconfigure.go','if len(added) == 0 {','if true {'),
('allocation/reclaims.go','if s.Counters.Recoveries != plan.Generation {','if false {'),
('allocation/register.go','&& !holdsAnyOf(h, workers) ','&& false '),
('allocation/requests.go','if s.hasNewerAttempt(req) {','if false {'),
('allocation/requests.go','\tcase attempts[0] != req.Attempt:\n','\tcase false:\n'),
('allocation/reclaims.go','\t\ts.dropOrphan(job)\n\t\treturn ReclaimPlan{}','\t\treturn ReclaimPlan{}'),
('allocation/drains.go','\tif !s.TellsAdoptedToLeave {\n','\tif false {\n'),
('allocation/drains.go','\t\tif _, drained := s.Drains[n.Name]; drained {\n\t\t\tif told','\t\tif true {\n\t\t\tif told'),
('allocation/register.go','\tif s.ChargesAdopted {\n','\tif false {\n'),
]
if '--check' in sys.argv[1:]:
    stale=[(f,a) for f,a,b in muts if a not in open(f).read()]
    for f,a in stale:
        print(f'stale mutation: {f} has no {a!r}')
    sys.exit(1 if stale else 0)

survived = 0
for f,a,b in muts:
    src=open(f).read()
    assert a in src,(f,a)
    open(f,'w').write(src.replace(a,b,1))
    r=subprocess.run(['go','test','-count=1','./allocation/'],capture_output=True,text=True)
    open(f,'w').write(src)
    fails=[l.strip() for l in r.stdout.splitlines() if l.strip().startswith('--- FAIL') and '/' in l]
    print('KILLED' if r.returncode else 'SURVIVED', f, a.strip()[:60], fails[:2])
    survived += r.returncode == 0
sys.exit(1 if survived else 0)
