"""A large folded-stacks file for timing `onefix report` on imported profiles (BENCHMARKS.md,
"Profiles recorded elsewhere"): 50,000 distinct Go-like stacks, 10 to 32 frames deep, over 400
functions of /srv/app/steps.go, with 1 to 50 samples each. Deterministic (seeded).

    python3 bench/import/make_folded.py > big.folded
"""

import random
import sys

random.seed(1)
functions = [f"main.step{i}" for i in range(400)]
out = sys.stdout
for _ in range(50_000):
    frames = ["runtime.goexit (/usr/lib/go-1.19/src/runtime/asm_amd64.s:1594)", "main.main (/srv/app/main.go:10)"]
    for _ in range(random.randint(8, 30)):
        frames.append(f"{random.choice(functions)} (/srv/app/steps.go:{random.randint(1, 2000)})")
    out.write(";".join(frames) + f" {random.randint(1, 50)}\n")
