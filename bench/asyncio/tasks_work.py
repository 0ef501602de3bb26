"""An asyncio workload for the overhead benchmark: TASKS tasks that compute a little and yield
to the loop, ROUNDS times each; prints its wall and CPU seconds (CPU includes every thread of the
process, so a bootstrap thread's work counts)."""

import asyncio
import json
import sys
import time

TASKS, ROUNDS = int(sys.argv[1]), int(sys.argv[2])
# With SLEEP_MS > 0 each step waits that long (a timer stands in for I/O): the loop mostly waits in
# its selector, which is when the bootstrap walks the tasks.
SLEEP_S = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.0


async def worker(i: int) -> int:
    total = 0
    for r in range(ROUNDS):
        for k in range(300):
            total += (k * i + r) % 7
        await asyncio.sleep(SLEEP_S)  # many suspended coroutines at each moment
    return total


async def main():
    t0, c0 = time.perf_counter(), time.process_time()
    check = sum(await asyncio.gather(*(worker(i) for i in range(TASKS))))
    print(json.dumps({"seconds": round(time.perf_counter() - t0, 4), "cpu_seconds": round(time.process_time() - c0, 4), "check": check}))


asyncio.run(main())
