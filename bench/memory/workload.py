"""Allocation benchmark workload: parse query strings, keep one parsed mapping in ten (retention),
drop the rest (churn). Prints {"work_s": CPU seconds of the loop} as its last line (CPU, not
wall time, so that other load on the machine does not count)."""
import json
import sys
import time
from urllib.parse import parse_qs

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
kept = []
start = time.process_time()
for i in range(N):
    q = f"info_hash=h{i % 977}&peer_id=p{i}&port={6881 + i % 100}&uploaded=0&downloaded={i}&left={i * 7}&compact=1"
    params = parse_qs(q)
    if i % 10 == 0:
        kept.append(params)
print(json.dumps({"work_s": time.process_time() - start, "kept": len(kept)}))
