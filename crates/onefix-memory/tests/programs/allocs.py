# Known Python allocation sequences: keep() retains about 8 MB of small objects, churn()
# allocates about 80 MB of them and drops each at once.
import sys

kept = []


def keep(n):
    for i in range(n):
        kept.append([i] * 120)  # keep-line: ~1 KB list retained per pass


def churn(n):
    for i in range(n):
        tmp = [i] * 120  # churn-line: ~1 KB list dropped per pass
        del tmp


if __name__ == "__main__":
    keep(8000)
    churn(80000)
    sys.exit(0)
