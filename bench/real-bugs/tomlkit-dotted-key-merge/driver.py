"""Load a board's settings file whose tables set many nested dotted keys
(`limits.power.rail.min1 = ...`), the use in python-poetry/tomlkit#193 and #319 (a 400-line file of
such keys took six minutes to load)."""
import tomlkit

DEVICES = 2
KEYS = 21
lines = []
for device in range(DEVICES):
    lines.append(f"[device{device}]")
    for i in range(KEYS):
        bound = ("min", "typ", "max")[i % 3]
        lines.append(f"limits.power.rail.{bound}{i} = {device * 100 + i}")
    lines.append("")
text = "\n".join(lines)

doc = tomlkit.parse(text)
total = sum(len(doc[f"device{d}"]["limits"]["power"]["rail"]) for d in range(DEVICES))
print(f"parsed {len(lines)} lines, {total} limits")
