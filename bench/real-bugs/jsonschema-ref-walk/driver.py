"""Validate a batch of API payloads against an OpenAPI-style schema whose types refer to
each other through "$ref": "#/definitions/...", with one validator reused for the batch
(the use in python-jsonschema/jsonschema#853)."""
import jsonschema

N_TYPES = 120
definitions = {}
for i in range(N_TYPES):
    definitions[f"Type{i}"] = {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 0},
            "name": {"type": "string", "maxLength": 64},
            "tags": {"type": "array", "items": {"type": "string"}},
            "child": {"$ref": f"#/definitions/Type{(i + 1) % N_TYPES}"},
            "extra": {"$ref": f"#/definitions/Leaf{i % 10}"},
        },
        "required": ["id", "name"],
    }
for j in range(10):
    definitions[f"Leaf{j}"] = {"type": "object", "properties": {"v": {"type": "number"}}}
schema = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "array",
    "items": {"$ref": "#/definitions/Type0"},
    "definitions": definitions,
}


def payload(depth):
    node = {"id": depth, "name": f"n{depth}", "tags": ["a", "b"], "extra": {"v": 1.5}}
    if depth:
        node["child"] = payload(depth - 1)
    return node


batch = [payload(12) for _ in range(330)]
validator = jsonschema.Draft7Validator(schema)
errors = sum(1 for _ in validator.iter_errors(batch))
print(f"validated {len(batch)} payloads, {errors} errors")
