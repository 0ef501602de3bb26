"""feature_flags: decides which features each request gets from an XML flag file.
Planted: the static flags.xml is parsed with ElementTree on every call.
Expected: repeated-setup (config parse per call)."""
import hashlib
import os
import random
import tempfile
import time
import xml.etree.ElementTree as ET

FLAGS_PATH = os.path.join(tempfile.gettempdir(), "onefix-trial-flags.xml")


def write_flags():
    root = ET.Element("flags", version="3")
    for i in range(300):
        f = ET.SubElement(root, "flag", name=f"feature_{i}", enabled=str(i % 3 != 0).lower())
        ET.SubElement(f, "rollout", percent=str((i * 7) % 101))
        seg = ET.SubElement(f, "segments")
        for s in range(4):
            ET.SubElement(seg, "segment", name=f"seg{(i + s) % 12}")
        ET.SubElement(f, "description").text = f"Feature {i}: experimental behaviour for cohort {i % 12}"
    ET.ElementTree(root).write(FLAGS_PATH)


def bucket(user, flag):
    return int(hashlib.md5(f"{user}:{flag}".encode()).hexdigest()[:4], 16) % 100


def flags_for(user, segment, wanted):
    tree = ET.parse(FLAGS_PATH)  # CULPRIT
    out = {}
    for flag in tree.getroot().iter("flag"):
        name = flag.get("name")
        if name not in wanted:
            continue
        segs = {s.get("name") for s in flag.iter("segment")}
        pct = int(flag.find("rollout").get("percent"))
        out[name] = flag.get("enabled") == "true" and segment in segs and bucket(user, name) < pct
    return out


def main():
    write_flags()
    rng = random.Random(11)
    deadline = time.monotonic() + 8
    n = on = 0
    while n < 2500 and time.monotonic() < deadline:
        wanted = {f"feature_{rng.randrange(300)}" for _ in range(5)}
        res = flags_for(f"user{rng.randrange(10_000)}", f"seg{rng.randrange(12)}", wanted)
        on += sum(res.values())
        n += 1
    os.unlink(FLAGS_PATH)
    print(f"{n} requests, {on} flags on")


if __name__ == "__main__":
    main()
