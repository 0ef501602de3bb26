# Runs every statement onefix sends to ClickHouse (from `onefix fleet sql`, on stdin) on chdb,
# which embeds a current ClickHouse: the SQL must be accepted by today's release as well as by
# Debian's 18.16, which the other fleet tests use. Prints the release and how many ran.
import sys

import chdb
from chdb import session

text = sys.stdin.read()
statements = [s.strip() for s in text.split("\n;\n") if s.strip()]
with session.Session() as s:
    s.query("CREATE DATABASE IF NOT EXISTS onefix")
    s.query("USE onefix")
    version = str(s.query("SELECT version()", "CSV")).strip().strip('"')
    for statement in statements:
        try:
            s.query(statement, "JSON" if statement.startswith("SELECT") else "CSV")
        except Exception as e:  # noqa: BLE001 - every failure is reported with its statement
            print(f"refused by ClickHouse {version}: {e}\n{statement}", file=sys.stderr)
            sys.exit(1)
    # The aggregate the report reads must find the example rows.
    rows = str(s.query("SELECT count() FROM samples", "CSV")).strip()
    if rows != "1":
        print(f"the example batch did not arrive: {rows} rows", file=sys.stderr)
        sys.exit(1)
print(f"{version} {len(statements)}")
