# Planted mistake: line 28 `value = yaml.safe_load(f)` — get_setting() re-reads and
# re-parses the routing YAML file on every lookup, i.e. several times per order.
# Expected kind: repeated-setup (config parse; fix: load the config once at start-up).
# Scenario: route incoming orders to warehouses using rules from a YAML config file.
import os
import random
import tempfile
import time

import yaml

CONFIG = {
    "warehouses": {f"wh-{c}": {"region": r, "capacity": 1000 + i * 10, "priority": i % 3}
                   for i, (c, r) in enumerate((f"{n:02d}", ["eu", "us", "apac"][n % 3]) for n in range(40))},
    "regions": {"eu": ["de", "fr", "it", "es", "nl"], "us": ["us", "ca", "mx"], "apac": ["jp", "au", "sg", "in"]},
    "limits": {"max_weight_kg": 30, "express_surcharge": 4.5, "free_shipping_over": 50},
    "features": {"split_orders": True, "carbon_offset": False},
}


def write_config(path):
    with open(path, "w") as f:
        yaml.safe_dump(CONFIG, f)


def get_setting(path, *keys):
    with open(path) as f:
        value = yaml.safe_load(f)  # CULPRIT
    for k in keys:
        value = value[k]
    return value


def route(order, config_path):
    regions = get_setting(config_path, "regions")
    region = next(r for r, countries in regions.items() if order["country"] in countries)
    if order["weight"] > get_setting(config_path, "limits", "max_weight_kg"):
        return None
    candidates = [(name, wh) for name, wh in get_setting(config_path, "warehouses").items() if wh["region"] == region]
    candidates.sort(key=lambda nw: (nw[1]["priority"], -nw[1]["capacity"]))
    return candidates[0][0]


def main():
    random.seed(3)
    countries = ["de", "fr", "us", "ca", "jp", "au", "in", "nl"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "routing.yaml")
        write_config(path)
        start = time.monotonic()
        routed = {}
        for i in range(250):
            if time.monotonic() - start > 8:
                break
            order = {"id": i, "country": random.choice(countries), "weight": random.uniform(0.1, 40)}
            wh = route(order, path)
            routed[wh] = routed.get(wh, 0) + 1
        print(f"routed {sum(routed.values())} orders in {time.monotonic() - start:.1f}s: {sorted(routed.items(), key=str)[:3]}")


if __name__ == "__main__":
    main()
