"""Token updater: drain the queue of tokens that need an update (story 000).

For each queued token: POST its code+data to the get-method runner microservice
(plain HTTP, on this machine), decode the binary result, store it in the database.

Environment: RUNNER_URL (set by ./run), TOKEN_DB (set by ./run),
TOKENS (at most this many tokens, default 400), MAX_SECONDS (default 30).
"""

import asyncio
import base64
import json
import os
import sqlite3
import struct
import sys
import time

import httpx

STACK_HEAD = struct.Struct(">?Q32s32sH")
BATCH = 100
VARIANT = os.path.splitext(os.path.basename(__file__))[0].rpartition("_")[2]


async def run_get_method(client: httpx.AsyncClient, url: str, code: bytes, data: bytes):
    payload = {
        "method": "get_nft_data",
        "code": base64.b64encode(code).decode(),
        "data": base64.b64encode(data).decode(),
    }
    resp = await client.post(url, json=payload, timeout=10.0)
    resp.raise_for_status()
    result = resp.json()
    if not result.get("ok") or result.get("exit_code") != 0:
        raise RuntimeError(f"get-method failed: {result}")
    return base64.b64decode(result["stack"]), result["gas_used"]


def decode_stack(stack: bytes) -> dict:
    init, index, collection, owner, content_len = STACK_HEAD.unpack_from(stack)
    content = stack[STACK_HEAD.size : STACK_HEAD.size + content_len]
    if len(content) != content_len:
        raise ValueError("truncated stack")
    return {
        "initialized": init,
        "index": index,
        "collection": "0:" + collection.hex(),
        "owner": "0:" + owner.hex(),
        "content": content.decode(),
    }


def next_batch(db: sqlite3.Connection, n: int):
    return db.execute(
        "SELECT id, address, code, data FROM token_queue ORDER BY id LIMIT ?", (n,)
    ).fetchall()


def store_result(db: sqlite3.Connection, token_id: int, address: str, state: dict, gas: int):
    db.execute(
        "INSERT OR REPLACE INTO token_state VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            address,
            int(state["initialized"]),
            state["index"] & 0x7FFFFFFFFFFFFFFF,
            state["collection"],
            state["owner"],
            state["content"],
            gas,
            time.time(),
        ),
    )
    db.execute("DELETE FROM token_queue WHERE id = ?", (token_id,))


async def drain(client: httpx.AsyncClient, db: sqlite3.Connection, url: str, limit: int, deadline: float) -> int:
    done = 0
    while done < limit and time.monotonic() < deadline:
        batch = next_batch(db, min(BATCH, limit - done))
        if not batch:
            break
        for token_id, address, code, data in batch:
            stack, gas = await run_get_method(client, url, code, data)
            store_result(db, token_id, address, decode_stack(stack), gas)
            done += 1
            if time.monotonic() >= deadline:
                break
        db.commit()
    return done


async def main() -> int:
    url = os.environ.get("RUNNER_URL")
    db_path = os.environ.get("TOKEN_DB")
    if not url or not db_path:
        print("RUNNER_URL and TOKEN_DB must be set: start this through lab/token-updater/run", file=sys.stderr)
        return 2
    limit = int(os.environ.get("TOKENS", "400"))
    max_seconds = float(os.environ.get("MAX_SECONDS", "30"))

    db = sqlite3.connect(db_path)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")

    t0 = time.monotonic()
    async with httpx.AsyncClient() as client:  # one client for the whole run, reused
        done = await drain(client, db, url, limit, t0 + max_seconds)
    seconds = time.monotonic() - t0

    stored = db.execute("SELECT COUNT(*) FROM token_state").fetchone()[0]
    left = db.execute("SELECT COUNT(*) FROM token_queue").fetchone()[0]
    db.close()
    rate = done / seconds if seconds > 0 else 0.0
    print(f"updater ({VARIANT}): {done} tokens in {seconds:.2f} s, {stored} stored, {left} left in queue")
    print(f"tokens/s: {rate:.1f}")
    print(json.dumps({
        "case": "token-updater", "variant": VARIANT, "tokens": done,
        "seconds": round(seconds, 4), "tokens_per_s": round(rate, 2),
    }))
    return 0 if done > 0 and stored == done else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
