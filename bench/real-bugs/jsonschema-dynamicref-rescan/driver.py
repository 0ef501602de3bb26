"""Validate a service configuration documents against a Draft 2020-12 schema with
jsonschema.validate(), which first checks the schema against the 2020-12 meta-schema (built on
$dynamicRef), the use reported in python-jsonschema/jsonschema#941 ("validate hangs in 4.5.0")."""
import jsonschema

schema = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "replicas": {"type": "integer", "minimum": 1},
        "ports": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                    "protocol": {"enum": ["tcp", "udp"]},
                },
                "required": ["port"],
            },
        },
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["name"],
}

doc = {"name": "billing", "replicas": 2, "ports": [{"port": 8000, "protocol": "tcp"}],
       "env": {"MODE": "prod"}}
jsonschema.validate(doc, schema)
print(f"{doc['name']}: valid")
