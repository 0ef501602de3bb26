#!/usr/bin/env bash
# Installs onefix the two ways users do, each into a fresh place, and checks the installed
# binary works (issue 8); not run in CI (a release build each, several minutes).
#
#   bench/install_check.sh            both: cargo install, then pip install . in a new venv
#   bench/install_check.sh pip        one of them (cargo | pip)
#
# Needs network access to crates.io (cargo) and PyPI (pip fetches maturin to build the wheel).
# Exit status 0 when every check passed; each failure is printed.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/onefix-install.XXXXXX")"
WAYS=("$@")
[[ ${#WAYS[@]} -eq 0 ]] && WAYS=(cargo pip)
failed=0

check() { # check NAME BINARY
    local name="$1" bin="$2"
    "$bin" --version | grep -q '^onefix [0-9]' || { echo "$name: --version failed"; failed=1; }
    "$bin" --help | grep -q 'record' || { echo "$name: --help failed"; failed=1; }
    "$bin" generate completions bash | bash -n || { echo "$name: completions failed"; failed=1; }
    "$bin" generate man | grep -q '^.TH onefix 1' || { echo "$name: man page failed"; failed=1; }
    local prog="$WORK/spin.py"
    printf 'import time\ndef spin():\n    end = time.time() + 1.5\n    while time.time() < end:\n        sum(i * i for i in range(300))   # SPIN\nspin()\n' > "$prog"
    if "$bin" record --quiet --mode cpu -o "$WORK/$name.onefix" -- python3 "$prog" | grep -q 'spin.py:5'; then
        echo "$name: ok ($bin, $(stat -c %s "$bin") bytes)"
    else
        echo "$name: record did not name spin.py:5"; failed=1
    fi
}

for way in "${WAYS[@]}"; do
    case "$way" in
        cargo)
            cargo install --locked --quiet --path "$ROOT/crates/onefix" --root "$WORK/cargo" || { echo "cargo install failed"; failed=1; continue; }
            check cargo "$WORK/cargo/bin/onefix" ;;
        pip)
            python3 -m venv "$WORK/venv" && "$WORK/venv/bin/pip" install --quiet "$ROOT" || { echo "pip install failed"; failed=1; continue; }
            check pip "$WORK/venv/bin/onefix" ;;
        *) echo "unknown way: $way (cargo or pip)"; exit 2 ;;
    esac
done
rm -rf "$WORK"
exit $failed
