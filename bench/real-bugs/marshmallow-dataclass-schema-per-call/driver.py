"""Load a batch of JSON order payloads into dataclasses, building the schema where it is used
(`class_schema(Order)().load(payload)`, the pattern of marshmallow_dataclass's own docs), the use
that lovasoa/marshmallow_dataclass#70 made fast by caching the generated schema classes."""
import dataclasses
from typing import List, Optional

import marshmallow_dataclass


@dataclasses.dataclass
class Address:
    street: str
    city: str
    postcode: str
    country: str = "FR"


@dataclasses.dataclass
class Line:
    sku: str
    quantity: int
    unit_price: float
    discount: Optional[float] = None


@dataclasses.dataclass
class Order:
    id: int
    customer: str
    shipping: Address
    billing: Address
    lines: List[Line]
    note: Optional[str] = None
    gift: bool = False


def handle(payload):
    return marshmallow_dataclass.class_schema(Order)().load(payload)


payloads = [
    {
        "id": i,
        "customer": f"c{i % 97}",
        "shipping": {"street": f"{i} rue Haute", "city": "Lyon", "postcode": "69001"},
        "billing": {"street": f"{i} rue Basse", "city": "Lyon", "postcode": "69002"},
        "lines": [{"sku": f"S{j}", "quantity": j + 1, "unit_price": 9.5} for j in range(3)],
    }
    for i in range(800)
]
orders = [handle(p) for p in payloads]
print(f"loaded {len(orders)} orders, {sum(len(o.lines) for o in orders)} lines")
