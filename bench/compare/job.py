"""A batch job of a fixed amount of work: argv[1] million squares summed (about 0.1 s each on the
bench machine)."""
import sys

n = int(float(sys.argv[1]) * 1_000_000)
print(sum(i * i for i in range(n)))
