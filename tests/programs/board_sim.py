# Planted mistake: line 39 `snapshot = copy.deepcopy(world)` — the whole world state (a few
# thousand nested dicts) is deep-copied on every tick to keep an undo history nobody reads beyond
# the last few entries.
# Expected kind: deep-copy (fix: copy only what changes, or keep a bounded history of diffs).
# Scenario: a small agent-based market simulation.
import copy
import random
import time


def make_world(n_agents):
    return {
        "tick": 0,
        "agents": [
            {"id": i, "cash": 100.0, "inventory": {"wheat": 5, "iron": 2, "wood": 3},
             "position": [random.random(), random.random()], "history": [1.0, 2.0, 3.0]}
            for i in range(n_agents)
        ],
        "prices": {"wheat": 1.0, "iron": 3.0, "wood": 2.0},
    }


def step(world):
    for agent in random.sample(world["agents"], 50):
        good = random.choice(["wheat", "iron", "wood"])
        price = world["prices"][good]
        if agent["cash"] > price:
            agent["cash"] -= price
            agent["inventory"][good] += 1
            world["prices"][good] *= 1.001
    world["tick"] += 1


def run(world, ticks, deadline):
    undo = []
    for _ in range(ticks):
        if time.monotonic() > deadline:
            break
        snapshot = copy.deepcopy(world)  # CULPRIT
        undo.append(snapshot)
        undo = undo[-5:]
        step(world)
    return world


def main():
    random.seed(11)
    world = make_world(1500)
    start = time.monotonic()
    world = run(world, 400, start + 8)
    print(f"{world['tick']} ticks in {time.monotonic() - start:.1f}s; prices {world['prices']}")


if __name__ == "__main__":
    main()
