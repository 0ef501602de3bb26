"""An asyncio workload for the overhead benchmark: TASKS tasks that compute a little and yield
to the loop, ROUNDS times each; prints its wall and CPU seconds (CPU includes every thread of the
process, so a bootstrap thread's work counts)."""

import asyncio
import json
import sys
import time

TASKS, ROUNDS = int(sys.argv[1]), int(sys.argv[2])


async def worker(i: int) -> int:
    total = 0
    for r in range(ROUNDS):
        for k in range(300):
            total += (k * i + r) % 7
        await asyncio.sleep(0)  # let the other tasks run: many suspended coroutines at each moment
    return total


async def main():
    t0, c0 = time.perf_counter(), time.process_time()
    check = sum(await asyncio.gather(*(worker(i) for i in range(TASKS))))
    print(json.dumps({"seconds": round(time.perf_counter() - t0, 4), "cpu_seconds": round(time.process_time() - c0, 4), "check": check}))


asyncio.run(main())
