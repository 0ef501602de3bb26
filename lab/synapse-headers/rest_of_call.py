"""Why the fixed ping gains more than an Amdahl bound on the slow one says (a benchmark).

    lab/synapse-headers/rest-of-call      (starts an axon per variant, prints ms per call)

Slow variant: the time of each call split into the schema rebuilds (model_json_schema, timed
with perf_counter) and the rest. Fixed variant: the rest of the call (the whole fixed call)
timed right after a pause of the slow call's schema time spent four ways: none, a pure-Python
CPU burn, a sleep, and schema rebuilds. If the rest is slower after any pause, the fix removes
more than the schema line's own samples: the wait for the reply (the axon's wake-up) and the
caches go cold while the culprit runs, and no profile of the slow program can see that.

Environment: AXON_PORT (set by the script), VARIANT (slow or fixed), COUNT (default 300).
"""

import importlib
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

VARIANT = os.environ["VARIANT"]
COUNT = int(os.environ.get("COUNT", "300"))
ping = importlib.import_module(f"ping_{VARIANT}")
synapse = importlib.import_module(f"synapse_{VARIANT}")
dendrite = ping.Dendrite("127.0.0.1", int(os.environ["AXON_PORT"]))
ms = lambda seconds: round(seconds * 1000, 3)  # noqa: E731


def slow_split() -> dict:
    own = synapse.Ping.model_json_schema.__func__
    spent = [0.0]

    def timed(cls, *a, **k):
        t = time.perf_counter()
        try:
            return own(cls, *a, **k)
        finally:
            spent[0] += time.perf_counter() - t

    synapse.Ping.model_json_schema = classmethod(timed)
    total, schema = [], []
    for i in range(COUNT):
        spent[0] = 0.0
        t = time.perf_counter()
        dendrite.call(synapse.Ping(dummy_input=i))
        total.append(time.perf_counter() - t)
        schema.append(spent[0])
    t, s = statistics.mean(total), statistics.mean(schema)
    return {"variant": "slow", "call_ms": ms(t), "schema_ms": ms(s), "rest_ms": ms(t - s), "amdahl_bound": round(t / (t - s), 1)}


def fixed_after(pause_s: float) -> dict:
    slow_schema = importlib.import_module("synapse_slow").Ping

    def burn():
        end = time.perf_counter() + pause_s
        while time.perf_counter() < end:
            pass

    def schema():
        end = time.perf_counter() + pause_s
        while time.perf_counter() < end:
            slow_schema.model_json_schema()

    out = {"variant": "fixed", "pause_ms": ms(pause_s)}
    for name, pause in [("none", lambda: None), ("cpu_burn", burn), ("sleep", lambda: time.sleep(pause_s)), ("schema_rebuilds", schema)]:
        rest = []
        for i in range(COUNT):
            pause()
            t = time.perf_counter()
            dendrite.call(synapse.Ping(dummy_input=i))
            rest.append(time.perf_counter() - t)
        out[f"call_ms_after_{name}"] = ms(statistics.mean(rest))
    return out


result = slow_split() if VARIANT == "slow" else fixed_after(float(os.environ.get("PAUSE_MS", "27")) / 1000)
print(json.dumps(result))
