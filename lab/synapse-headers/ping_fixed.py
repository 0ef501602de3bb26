"""Ping benchmark of story 002, as in the bittensor PR's verification script.

A dendrite (client) sends COUNT pings, one after another, to a local axon over
one keep-alive HTTP connection. Each ping builds a synapse, fills in the
dendrite/axon terminal info, signs it, turns it into headers (to_headers), sends
it, and parses the answer. The per-call time is measured around all of that.

Environment: AXON_PORT (set by ./run), COUNT (default 10000),
MAX_SECONDS (default 30: stop early, report the calls made).
"""

import hashlib
import hmac
import http.client
import json
import os
import statistics
import sys
import time
import uuid

from synapse_fixed import Ping, TerminalInfo

VARIANT = os.path.splitext(os.path.basename(__file__))[0].rpartition("_")[2]
VERSION = 720
DENDRITE_HOTKEY = "5DvTpiniW9s3APmHRYn8FroUWyfnLtrsid5Mtn5EwMXHN2ed"
AXON_HOTKEY = "5EnjDGNqqWnuL2HCAdxeEtN2oqtXZw6BMBe936Kfy2PFz1J1"
SIGNING_KEY = hashlib.sha256(DENDRITE_HOTKEY.encode()).digest()  # stand-in for the wallet's sr25519 key


class Dendrite:
    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.uuid = str(uuid.uuid1())
        self.conn = http.client.HTTPConnection(host, port, timeout=5)

    def preprocess(self, synapse: Ping, timeout: float) -> Ping:
        synapse.timeout = timeout
        synapse.dendrite = TerminalInfo(
            ip="127.0.0.1", version=VERSION, nonce=time.time_ns(), uuid=self.uuid, hotkey=DENDRITE_HOTKEY,
        )
        synapse.axon = TerminalInfo(ip=self.host, port=self.port, hotkey=AXON_HOTKEY)
        message = f"{synapse.dendrite.nonce}.{DENDRITE_HOTKEY}.{AXON_HOTKEY}.{self.uuid}.{synapse.body_hash}"
        synapse.dendrite.signature = "0x" + hmac.new(SIGNING_KEY, message.encode(), hashlib.sha256).hexdigest()
        return synapse

    def call(self, synapse: Ping, timeout: float = 5.0) -> Ping:
        start = time.perf_counter()
        synapse = self.preprocess(synapse, timeout)
        headers = synapse.to_headers()
        headers["Content-Type"] = "application/json"
        self.conn.request("POST", f"/{synapse.name}", body=synapse.model_dump_json().encode(), headers=headers)
        resp = self.conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"axon answered {resp.status}: {body[:200]!r}")
        response = type(synapse).model_validate_json(body)
        response.dendrite.status_code = resp.status
        response.dendrite.process_time = time.perf_counter() - start
        return response

    def close(self):
        self.conn.close()


def main() -> int:
    port = os.environ.get("AXON_PORT")
    if not port:
        print("AXON_PORT must be set: start this through lab/synapse-headers/run", file=sys.stderr)
        return 2
    num_queries = int(os.environ.get("COUNT", "10000"))
    max_seconds = float(os.environ.get("MAX_SECONDS", "30"))

    dendrite = Dendrite("127.0.0.1", int(port))
    ping_times = []
    t0 = time.monotonic()
    deadline = t0 + max_seconds
    for i in range(num_queries):
        if time.monotonic() >= deadline:
            break
        response = dendrite.call(Ping(dummy_input=i), timeout=5)
        if response.deserialize() != 2 * i:
            raise RuntimeError(f"query {i}: wrong answer {response.dummy_output}")
        ping_times.append(response.dendrite.process_time)
    dendrite.close()
    seconds = time.monotonic() - t0

    n = len(ping_times)
    average = sum(ping_times) / n if n else 0.0
    stdev = statistics.stdev(ping_times) if n > 1 else 0.0
    print(f"Number of queries: {n}")
    print(f"Average: {average:.4f} seconds")
    print(f"Standard deviation: {stdev:.4f} seconds")
    print(json.dumps({
        "case": "synapse-headers", "variant": VARIANT, "queries": n, "requested": num_queries,
        "seconds": round(seconds, 4), "mean_s": average, "stdev_s": stdev,
    }))
    return 0 if n > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
