import json,glob,statistics,collections
def rows(pat):
  out=[]
  for f in sorted(glob.glob(pat)):
    for l in open(f):
      try: out.append(json.loads(l))
      except: pass
  return out
for kind,key,fields in [('msg','rtt_p50_us',('size',)),('kv','ops_per_s',('workload','threads','in_flight')),('txn','tx_per_s',('kind','threads'))]:
  d=collections.defaultdict(lambda: collections.defaultdict(list))
  extra=collections.defaultdict(lambda: collections.defaultdict(list))
  for v in ('old','new'):
    for j in rows(f'{kind}-{v}-run*.json'):
      if key not in j: continue
      k=tuple(j.get(x) for x in fields)
      d[k][v].append(j[key])
      for e in ('p50_us','remote_commit_p50_us','commit_p50_us','msgs_per_s','rpc_rtt_p50_us'):
        if e in j: extra[(k,e)][v].append(j[e])
  print(kind, key)
  for k in sorted(d, key=str):
    o=d[k]['old']; n=d[k]['new']
    if not o or not n: continue
    mo,mn=statistics.median(o),statistics.median(n)
    ex=' '.join(f"{e}:{statistics.median(extra[(k,e)]['old']):.1f}->{statistics.median(extra[(k,e)]['new']):.1f}" for (kk,e) in extra if kk==k and extra[(kk,e)]['old'] and extra[(kk,e)]['new'])
    print(' ',k, f"old {mo:,.1f} ({min(o):,.0f}-{max(o):,.0f})  new {mn:,.1f} ({min(n):,.0f}-{max(n):,.0f})  new/old {mn/mo:.2f}", ex)
