"""A batch job: keep the first occurrence of each customer id, checking membership in a list.
`--rounds N` runs it N times (a longer run for `onefix top`)."""
import sys

# The input, read and parsed the same way in both versions: 400,000 order lines, of which the
# first 12,000 customer ids are deduplicated.
orders = [f"{(i * 7919) % 6000},{i % 97}.{i % 100:02d}" for i in range(400000)]
ids = [int(line.split(",")[0]) for line in orders[:12000]]
total = sum(float(line.split(",")[1]) for line in orders)
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
    print(f"kept {len(kept)} of {len(ids)} (orders total {total:.2f})", flush=True)
