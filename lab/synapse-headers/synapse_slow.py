"""Synapse: a pydantic v2 model sent between neurons as HTTP headers (story 002).

Shaped like bittensor's Synapse: route name, timeout, sizes, the dendrite
(client) and axon (server) TerminalInfo, and a body hash. to_headers() turns it
into HTTP headers on every call; from_headers() parses them back on the server.
Ping is a subnet-style protocol on top of it, with one required input.
"""

import base64
import hashlib
import json
import sys
from typing import Any, ClassVar, Optional

import pydantic

from terminal_info import TerminalInfo, cast_float, cast_int


class Synapse(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(validate_assignment=True)

    name: Optional[str] = pydantic.Field(
        title="name", description="The HTTP route name, set on axon.attach(forward_fn).",
        examples=["Forward"], default=None, frozen=False, repr=False,
    )
    timeout: Optional[float] = pydantic.Field(
        title="timeout", description="The total query length, set by the dendrite.",
        examples=[12.0], default=12.0, frozen=False, repr=False,
    )
    total_size: Optional[int] = pydantic.Field(
        title="total_size", description="Total size of the request body in bytes.",
        examples=[1000], default=0, frozen=False, repr=False,
    )
    header_size: Optional[int] = pydantic.Field(
        title="header_size", description="Size of the request headers in bytes.",
        examples=[1000], default=0, frozen=False, repr=False,
    )
    dendrite: Optional[TerminalInfo] = pydantic.Field(
        title="dendrite", description="Dendrite (client) terminal information.",
        examples=["TerminalInfo"], default=TerminalInfo(), frozen=False, repr=False,
    )
    axon: Optional[TerminalInfo] = pydantic.Field(
        title="axon", description="Axon (server) terminal information.",
        examples=["TerminalInfo"], default=TerminalInfo(), frozen=False, repr=False,
    )
    computed_body_hash: Optional[str] = pydantic.Field(
        title="computed_body_hash", description="The computed body hash of the request.",
        examples=["0x0813029319030129u4120u10841824y0182u091u230912u"], default="", frozen=True, repr=False,
    )

    required_hash_fields: ClassVar[tuple[str, ...]] = ()

    _cast_sizes = pydantic.field_validator("total_size", "header_size", mode="before")(cast_int)
    _cast_timeout = pydantic.field_validator("timeout", mode="before")(cast_float)

    @pydantic.model_validator(mode="before")
    @classmethod
    def set_name_type(cls, values: Any) -> Any:
        if isinstance(values, dict):
            values["name"] = cls.__name__
        return values

    def deserialize(self) -> "Synapse":
        return self

    @classmethod
    def get_size(cls, obj: Any, seen: Optional[set] = None) -> int:
        """Recursive sys.getsizeof over dicts, iterables and object __dict__s."""
        if seen is None:
            seen = set()
        if id(obj) in seen:
            return 0
        seen.add(id(obj))
        size = sys.getsizeof(obj)
        if isinstance(obj, dict):
            size += sum(cls.get_size(k, seen) + cls.get_size(v, seen) for k, v in obj.items())
        elif hasattr(obj, "__dict__"):
            size += cls.get_size(obj.__dict__, seen)
        elif hasattr(obj, "__iter__") and not isinstance(obj, (str, bytes, bytearray)):
            size += sum(cls.get_size(i, seen) for i in obj)
        return size

    def get_total_size(self) -> int:
        self.total_size = self.get_size(self)
        return self.total_size

    @property
    def body_hash(self) -> str:
        """SHA3-256 over the fields listed in required_hash_fields."""
        parts = []
        if self.required_hash_fields:
            fields = self.model_dump()
            for field in self.required_hash_fields:
                parts.append(hashlib.sha3_256(str(fields[field]).encode()).hexdigest())
        return hashlib.sha3_256("".join(parts).encode()).hexdigest()

    def to_headers(self) -> dict[str, str]:
        """The synapse as HTTP headers: name, timeout, both terminals, dummies of required inputs, sizes, hash."""
        headers: dict[str, str] = {"name": str(self.name), "timeout": str(self.timeout)}
        if self.axon:
            headers.update(
                {f"bt_header_axon_{k}": str(v) for k, v in self.axon.model_dump().items() if v is not None}
            )
        if self.dendrite:
            headers.update(
                {f"bt_header_dendrite_{k}": str(v) for k, v in self.dendrite.model_dump().items() if v is not None}
            )

        instance_fields = self.model_dump()
        for field, value in instance_fields.items():
            required = self.model_json_schema().get("required", [])
            if field in headers or value is None:
                continue
            if field in required:
                # an empty instance of the value's type, so the axon side passes validation
                try:
                    serialized = json.dumps(value.__class__())
                except TypeError as e:
                    raise ValueError(f"field {field} with value {value!r} is not JSON serializable") from e
                headers[f"bt_header_input_obj_{field}"] = base64.b64encode(serialized.encode()).decode()

        headers["header_size"] = str(sys.getsizeof(headers))
        headers["total_size"] = str(self.get_total_size())
        headers["computed_body_hash"] = self.body_hash
        return headers

    @classmethod
    def parse_headers_to_inputs(cls, headers: dict[str, str]) -> dict[str, Any]:
        inputs: dict[str, Any] = {"axon": {}, "dendrite": {}}
        for key, value in headers.items():
            key = key.lower()
            if key.startswith("bt_header_axon_"):
                inputs["axon"][key[len("bt_header_axon_"):]] = value
            elif key.startswith("bt_header_dendrite_"):
                inputs["dendrite"][key[len("bt_header_dendrite_"):]] = value
            elif key.startswith("bt_header_input_obj_"):
                field = key[len("bt_header_input_obj_"):]
                if field not in inputs:
                    inputs[field] = json.loads(base64.b64decode(value.encode()).decode())
        lowered = {k.lower(): v for k, v in headers.items()}
        for field in ("timeout", "name", "header_size", "total_size", "computed_body_hash"):
            inputs[field] = lowered.get(field)
        return inputs

    @classmethod
    def from_headers(cls, headers: dict[str, str]) -> "Synapse":
        return cls(**cls.parse_headers_to_inputs(headers))


class Ping(Synapse):
    """A subnet protocol: the validator sends a number, the miner doubles it."""

    dummy_input: int = pydantic.Field(title="dummy_input", description="The number to double.", examples=[7])
    dummy_output: Optional[int] = pydantic.Field(
        title="dummy_output", description="The doubled number, filled in by the miner.", examples=[14], default=None,
    )

    required_hash_fields: ClassVar[tuple[str, ...]] = ("dummy_input",)

    def deserialize(self) -> Optional[int]:
        return self.dummy_output
