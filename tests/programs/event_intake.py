# Planted mistake: line 38 `jsonschema.validate(event, EVENT_SCHEMA)` — jsonschema.validate()
# checks the schema itself and builds a new validator on every call, before validating.
# Expected kind: repeated-setup (fix: build one validator, e.g. Draft202012Validator(schema),
# and call its validate() per event).
# Scenario: validate a stream of webhook events against a JSON schema before storing them.
import json
import random
import time

import jsonschema

EVENT_SCHEMA = {
    "type": "object",
    "required": ["id", "kind", "amount", "currency", "tags"],
    "properties": {
        "id": {"type": "string", "pattern": "^evt_[0-9a-f]{12}$"},
        "kind": {"enum": ["charge", "refund", "payout"]},
        "amount": {"type": "integer", "minimum": 0},
        "currency": {"type": "string", "minLength": 3, "maxLength": 3},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        "meta": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


def make_event(rng):
    return {"id": "evt_%012x" % rng.getrandbits(48), "kind": rng.choice(["charge", "refund", "payout"]),
            "amount": rng.randint(0, 10**6), "currency": "EUR", "tags": ["web", "eu"], "meta": {"source": "api"}}


def main():
    rng = random.Random(7)
    stored = []
    end = time.time() + 4
    n = 0
    while time.time() < end:
        event = make_event(rng)
        jsonschema.validate(event, EVENT_SCHEMA)  # CULPRIT
        stored.append(json.dumps(event))
        n += 1
    print(n, "events stored")


main()
