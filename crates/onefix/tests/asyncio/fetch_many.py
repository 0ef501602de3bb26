"""Fetch N resources from a local HTTP server, ROUNDS times, and digest each reply.

    python3 fetch_many.py PORT N ROUNDS serial|gather|taskgroup [uvloop]

serial awaits the requests one after another; gather and taskgroup issue a round's requests
concurrently. Prints one JSON line with the seconds the rounds took.
"""

import asyncio
import json
import sys
import time


def digest(body: bytes) -> int:
    # Decoding a reply: a few milliseconds of the program's own work per request.
    total = 0
    for _ in range(8):
        for i in range(0, len(body), 2):
            total = (total * 31 + body[i]) % 1_000_003
    return total


class Pool:
    """Kept-alive HTTP/1.1 connections to one server, each used by one request at a time."""

    def __init__(self, port: int):
        self.port = port
        self.idle = []

    async def fetch(self, path: str) -> bytes:
        if self.idle:
            reader, writer = self.idle.pop()
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: local\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")  # the await that waits for the server
        length = int(head.lower().partition(b"content-length:")[2].split(b"\r\n")[0])
        body = await reader.readexactly(length)
        self.idle.append((reader, writer))
        return body

    def close(self):
        for _, writer in self.idle:
            writer.close()


async def serial(pool: Pool, paths: list) -> int:
    total = 0
    for path in paths:
        body = await pool.fetch(path)  # one request at a time
        total += digest(body)
    return total


async def fetch_and_digest(pool: Pool, path: str) -> int:
    return digest(await pool.fetch(path))


async def gather(pool: Pool, paths: list) -> int:
    return sum(await asyncio.gather(*(fetch_and_digest(pool, p) for p in paths)))


async def taskgroup(pool: Pool, paths: list) -> int:
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(fetch_and_digest(pool, p)) for p in paths]
    return sum(t.result() for t in tasks)


async def main() -> None:
    port, n, rounds, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    run = {"serial": serial, "gather": gather, "taskgroup": taskgroup}[mode]
    pool = Pool(port)
    t0, cpu0 = time.perf_counter(), time.process_time()
    check = 0
    for r in range(rounds):
        check += await run(pool, [f"/item/{r}/{i}" for i in range(n)])
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - cpu0
    pool.close()
    print(json.dumps({"mode": mode, "requests": n * rounds, "seconds": round(seconds, 4), "cpu_seconds": round(cpu_seconds, 4), "check": check}))


if sys.argv[5:] == ["uvloop"]:
    import uvloop

    uvloop.run(main())
else:
    asyncio.run(main())
