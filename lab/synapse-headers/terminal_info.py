"""TerminalInfo: what one end of a call (dendrite = client, axon = server) says about itself.

Shaped like bittensor's TerminalInfo (pydantic v2): every field optional, with a
title, description and examples, so the model's JSON schema is as rich as the
real one. Shared by synapse_slow.py and synapse_fixed.py (not part of the fix).
"""

from typing import Any, Optional

import pydantic


def cast_int(raw: Any) -> Optional[int]:
    """Header values arrive as strings; turn them back into ints."""
    return int(raw) if raw is not None and raw != "" else None


def cast_float(raw: Any) -> Optional[float]:
    """Header values arrive as strings; turn them back into floats."""
    return float(raw) if raw is not None and raw != "" else None


class TerminalInfo(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(validate_assignment=True)

    status_code: Optional[int] = pydantic.Field(
        title="status_code", description="The HTTP status code from the terminal.",
        examples=[200], default=None, frozen=False,
    )
    status_message: Optional[str] = pydantic.Field(
        title="status_message", description="The status message of the call.",
        examples=["Success"], default=None, frozen=False,
    )
    process_time: Optional[float] = pydantic.Field(
        title="process_time", description="Seconds the terminal spent on the call.",
        examples=[0.1], default=None, frozen=False,
    )
    ip: Optional[str] = pydantic.Field(
        title="ip", description="The IP address of the terminal.",
        examples=["127.0.0.1"], default=None, frozen=False,
    )
    port: Optional[int] = pydantic.Field(
        title="port", description="The port of the terminal.",
        examples=[8091], default=None, frozen=False,
    )
    version: Optional[int] = pydantic.Field(
        title="version", description="The protocol version of the terminal.",
        examples=[720], default=None, frozen=False,
    )
    nonce: Optional[int] = pydantic.Field(
        title="nonce", description="A unique monotonic nonce (time in ns) for the call.",
        examples=[1717000000000000000], default=None, frozen=False,
    )
    uuid: Optional[str] = pydantic.Field(
        title="uuid", description="A unique identifier of the terminal.",
        examples=["5ecbd69c-1cec-11ee-b0dc-e29ce36fec1a"], default=None, frozen=False,
    )
    hotkey: Optional[str] = pydantic.Field(
        title="hotkey", description="The public key (ss58 address) of the terminal.",
        examples=["5EnjDGNqqWnuL2HCAdxeEtN2oqtXZw6BMBe936Kfy2PFz1J1"], default=None, frozen=False,
    )
    signature: Optional[str] = pydantic.Field(
        title="signature", description="The signature of the call by the terminal's hotkey.",
        examples=["0x0813029319030129u4120u10841824y0182u091u230912u"], default=None, frozen=False,
    )

    _cast_status_code = pydantic.field_validator("status_code", "port", "version", "nonce", mode="before")(cast_int)
    _cast_process_time = pydantic.field_validator("process_time", mode="before")(cast_float)
