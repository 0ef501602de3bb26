# Planted mistake: line 20 `score += sum(ord(c) for c in word) % 7` — each of 4 threads scores
# words in pure Python; the threads take turns holding the GIL, so they mostly queue for it
# rather than run in parallel.
# Expected: rank 1 is the scoring line, with the GIL waits it causes as evidence (fix: fewer
# threads, processes, or a native call that releases the GIL).
# Scenario: a word scorer split over a thread pool in the hope of using more cores.
import sys
import threading
import time

THREADS = 4
ROUNDS = 200
DEADLINE = time.monotonic() + 20
WORDS = [f"word{i}xyz" * 3 for i in range(2000)]


def score(words):
    score = 0
    for word in words:
        score += sum(ord(c) for c in word) % 7  # CULPRIT
    return score


def worker(results, i):
    total = 0
    for r in range(ROUNDS):
        if time.monotonic() > DEADLINE:
            break
        # Each round's batch is new words: scoring it again is not a repeat of the last round.
        batch = [f"{w}{i}-{r}" for w in WORDS]
        total += score(batch)
    results[i] = total


def main():
    results = [0] * THREADS
    threads = [threading.Thread(target=worker, args=(results, i)) for i in range(THREADS)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"{sum(results)} in {time.monotonic() - start:.1f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
