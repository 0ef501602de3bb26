"""A batch job: keep the first occurrence of each customer id, checking membership in a list.
`--rounds N` runs it N times (a longer run for `onefix top`)."""
import sys

ids = [(i * 7919) % 6000 for i in range(12000)]
FIXED = "--fixed" in sys.argv
ROUNDS = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 1

for _ in range(ROUNDS):
    seen = set() if FIXED else []
    kept = []
    for customer in ids:
        if customer not in seen:  # CULPRIT
            kept.append(customer)
            if FIXED:
                seen.add(customer)
            else:
                seen.append(customer)
    print(f"kept {len(kept)} of {len(ids)}", flush=True)
