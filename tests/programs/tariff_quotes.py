"""tariff_quotes: prices shipping quotes from a carrier's tariff table.
Planted: the Tariff (its file read, parsed and indexed) is built again for every quote.
Expected: repeated-setup (an object built on every call, named at the line that builds it)."""
import os
import random
import tempfile
import time

TARIFF_PATH = os.path.join(tempfile.gettempdir(), f"onefix-trial-tariff-{os.getpid()}.csv")
MODES = ("road", "air", "sea")


def write_tariff():
    rng = random.Random(7)
    with open(TARIFF_PATH, "w") as f:
        for zone in range(40):
            for band in range(25):
                f.write(f"Z{zone:02d},{band * 2},{band * 2 + 2},{rng.uniform(3, 90):.2f},{rng.choice(MODES)}\n")


class Tariff:
    def __init__(self, path):
        with open(path) as f:
            rows = f.read().splitlines()
        fields = [row.split(",") for row in rows]
        self.bands = {}
        for zone, low, high, price, mode in fields:
            self.bands.setdefault(zone, []).append((float(low), float(high), float(price), mode))
        for bands in self.bands.values():
            bands.sort()
        self.modes = sorted({row[4] for row in fields})
        self.cheapest = {zone: min(b[2] for b in bands) for zone, bands in self.bands.items()}
        self.dearest = {zone: max(b[2] for b in bands) for zone, bands in self.bands.items()}

    def price(self, zone, kg):
        for low, high, price, _mode in self.bands[zone]:
            if low <= kg < high:
                return price
        return self.dearest[zone]


def quote(order):
    tariff = Tariff(TARIFF_PATH)  # CULPRIT
    base = tariff.price(order["zone"], order["kg"])
    return round(base * (1.2 if order["express"] else 1.0), 2)


def main():
    write_tariff()
    try:
        rng = random.Random(11)
        deadline = time.monotonic() + 20
        total, n = 0.0, 0
        for n in range(1, 2001):
            if time.monotonic() > deadline:
                break
            order = {"zone": f"Z{rng.randrange(40):02d}", "kg": rng.uniform(0, 50), "express": n % 5 == 0}
            total += quote(order)
        print(f"quoted {n} orders, {total:.2f} in all")
    finally:
        os.remove(TARIFF_PATH)


main()
