#!/usr/bin/env bash
# Runs onefix on every program here and compares its rank-1 finding with the planted line.
# ONEFIX: the binary (default: target/debug/onefix of this repo). OUT: where recordings go.
# MODE: wall (default) or cpu. PYTHON: the interpreter (default python3). ARGS: more record
# options (e.g. --native). Usage: run_all.sh [NAME]   (NAME: one program, without .py)
set -u
here="$(cd "$(dirname "$0")" && pwd)"
onefix="${ONEFIX:-$here/../../target/debug/onefix}"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
mode="${MODE:-wall}"
python="${PYTHON:-python3}"
extra=(${ARGS:-})
for prog in "$here"/${1:-*}.py; do
  name="$(basename "$prog" .py)"
  planted="$(grep -n '# CULPRIT$' "$prog" | cut -d: -f1)"
  "$onefix" record -q --mode "$mode" "${extra[@]}" --json "$out/$name.json" -o "$out/$name.onefix" -- "$python" "$prog" >"$out/$name.txt" 2>&1
  python3 - "$out/$name.json" "$name" "$planted" <<'PY'
import json, sys
path, name, planted = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    d = json.load(open(path))
except Exception as e:
    print(f"{name:16} ERROR {e}"); sys.exit()
fs = d.get("findings", [])
if not fs:
    print(f"{name:16} planted {planted:3}  no finding"); sys.exit()
f = fs[0]
ok = "RIGHT" if f["file"].endswith(name + ".py") and f["line"] == planted else "WRONG"
print(f"{name:16} planted {planted:3}  rank1 {f['file'].rsplit('/',1)[-1]}:{f['line']:<4} {f['kind']:28} share {f['share']:.2f}  {ok}")
PY
done
echo "recordings and outputs in $out"
