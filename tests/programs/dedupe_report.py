# Planted mistake: line 22 — a pure-Python O(n*m) edit-distance inner loop, run for every pair of
# customer names in one big region, inside a thread pool where the other 7 workers finish their
# small regions quickly and then sit idle (they must not be findings).
# Expected kind: hot-loop-compute (fix: a compiled library such as rapidfuzz, or blocking by key).
# Scenario: find likely-duplicate customer records per region with a thread pool.
import random
import string
import time
from concurrent.futures import ThreadPoolExecutor, as_completed


def make_names(n, seed):
    rnd = random.Random(seed)
    return ["".join(rnd.choice(string.ascii_lowercase) for _ in range(rnd.randint(10, 18))) for _ in range(n)]


def edit_distance(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))  # CULPRIT
        prev = cur
    return prev[-1]


def duplicates_in_region(region, names, deadline):
    found = []
    for i, a in enumerate(names):
        if time.monotonic() > deadline:
            break
        for b in names[i + 1:]:
            if abs(len(a) - len(b)) <= 2 and edit_distance(a, b) <= 3:
                found.append((a, b))
    return region, found


def main():
    start = time.monotonic()
    deadline = start + 8
    regions = {f"small-{r}": make_names(30, r) for r in range(7)}
    regions["big-emea"] = make_names(700, 99)
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(duplicates_in_region, r, names, deadline) for r, names in regions.items()]
        for fut in as_completed(futures):
            region, found = fut.result()
            print(f"{region}: {len(found)} likely duplicates")
    print(f"done in {time.monotonic() - start:.1f}s")


if __name__ == "__main__":
    main()
