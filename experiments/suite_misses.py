import csv, sys, collections
def load(p):
    g=collections.defaultdict(list)
    for r in csv.DictReader(open(p)):
        if r['status']=='ok': g[r['case_id']].append(r)
    return g
def misses(g):
    out=[]
    for case,rs in sorted(g.items()):
        wg=[r for r in rs if r['family']=='warpgauge']
        if not wg: continue
        t=float(wg[0]['device_median_us'])
        for r in rs:
            if r['family']=='warpgauge': continue
            ratio=float(r['device_median_us'])/t
            if ratio<0.97: out.append((case,r['provider'],ratio,t,float(r['device_median_us']),float(wg[0]['pct_copy_ceiling'] or 0)))
    return out
new=misses(load(sys.argv[1]))
for m in new: print(f"{m[0]:45s} {m[1]:38s} {m[2]:.3f}  wg {m[3]:8.2f} other {m[4]:8.2f}  {m[5]:5.1f}%")
print(len(new),'checks below 0.97;', len({m[0] for m in new}),'cases')
