"""Build step for the corpus's Rust bugs (ecosystem = "crates"); the runner imports it.

A bug's `driver/` is a small cargo project whose Cargo.toml names the crate's version as
`VERSION_PLACEHOLDER` (every occurrence is replaced, so a companion crate such as a derive
macro can be pinned to the same version). `build()` writes a copy of it per variant under
`work`, pins the version, turns on line tables for the release profile, builds it with its own
target directory, and asks cargo where the crate's sources are unpacked in the registry: that
directory is the maintainer's code (`--user-code`), while the copy's own `src/` is the user's.

Python 3.11+ standard library only.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import tomllib

PLACEHOLDER = "VERSION_PLACEHOLDER"
BUILD_TIMEOUT_S = 1800
METADATA_TIMEOUT_S = 300

# Appended to the copy's Cargo.toml: line tables and symbols in the optimised build (the
# profiler names lines from DWARF), and an empty workspace so that the copy never joins a
# workspace it happens to sit under.
PROFILE = """
[profile.release]
debug = true

[workspace]
"""


def _write_if_changed(path: pathlib.Path, data: bytes) -> None:
    # Rewriting an unchanged file would bump its mtime and make cargo rebuild the driver.
    if path.exists() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _copy_driver(driver: pathlib.Path, dest: pathlib.Path, version: str) -> str:
    """Copies the driver into dest with the version pinned; returns the binary's name."""
    manifest_text = (driver / "Cargo.toml").read_text()
    if PLACEHOLDER not in manifest_text:
        raise RuntimeError(f"{driver / 'Cargo.toml'} does not name the crate's version as {PLACEHOLDER}.")
    if "[profile." in manifest_text or "[workspace]" in manifest_text:
        raise RuntimeError(f"{driver / 'Cargo.toml'} must not set a profile or workspace: the build step adds them.")
    pinned = manifest_text.replace(PLACEHOLDER, version) + PROFILE
    try:
        manifest = tomllib.loads(pinned)
    except tomllib.TOMLDecodeError as err:
        raise RuntimeError(f"{driver / 'Cargo.toml'} is not valid TOML once pinned: {err}.") from None
    name = manifest.get("package", {}).get("name")
    if not name:
        raise RuntimeError(f"{driver / 'Cargo.toml'} has no [package] name.")
    _write_if_changed(dest / "Cargo.toml", pinned.encode())
    for source in sorted((driver / "src").rglob("*")):
        if source.is_file():
            _write_if_changed(dest / "src" / source.relative_to(driver / "src"), source.read_bytes())
    return name


def _cargo_error(text: str) -> str:
    """Cargo's first `error:` line (its last lines are often hints), else its last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error")]
    return (errors or lines or ["no output"])[0 if errors else -1].rstrip(".")


def _crate_source_dir(dest: pathlib.Path, crate: str, version: str, env: dict) -> str:
    """The crate's unpacked sources, as cargo resolved them (honours CARGO_HOME)."""
    try:
        done = subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--manifest-path", str(dest / "Cargo.toml")],
            capture_output=True, text=True, timeout=METADATA_TIMEOUT_S, env=env,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"cargo metadata for {crate} {version} took over {METADATA_TIMEOUT_S} s.") from None
    if done.returncode != 0:
        raise RuntimeError(f"cargo metadata for {crate} {version} failed: {_cargo_error(done.stderr)}.")
    for package in json.loads(done.stdout)["packages"]:
        if package["name"] == crate and package["version"] == version:
            return str(pathlib.Path(package["manifest_path"]).parent)
    raise RuntimeError(f"the driver's build did not resolve {crate} {version}.")


def build(bug_dir: pathlib.Path, bug: dict, variant: str, work: pathlib.Path) -> dict:
    """Build the driver against bug[variant]'s version. Returns
    {"argv": [path-to-binary, ...args], "user_code": <the crate's source dir in the cargo registry>,
     "cwd": <dir to run in>}. Raises RuntimeError with one sentence on failure."""
    if variant not in ("slow", "fixed"):
        raise RuntimeError(f"unknown variant {variant!r}: expected 'slow' or 'fixed'.")
    if shutil.which("cargo") is None:
        raise RuntimeError("cargo is not on PATH, so the Rust drivers cannot be built.")
    bug_dir = pathlib.Path(bug_dir).resolve()
    driver = bug_dir / "driver"
    if not (driver / "Cargo.toml").is_file():
        raise RuntimeError(f"{driver} has no Cargo.toml.")
    crate = bug.get("import_dir") or bug["package"]
    version = str(bug[variant])
    work = pathlib.Path(work).resolve()
    dest = work / "crates" / bug["id"] / f"{variant}-{version}"
    target = work / "crates-target" / bug["id"] / f"{variant}-{version}"
    name = _copy_driver(driver, dest, version)

    env = dict(os.environ, CARGO_TARGET_DIR=str(target))
    # Nothing from the caller's profile settings may change what is built and measured.
    for key in list(env):
        if key.startswith("CARGO_PROFILE_") or key in ("RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS"):
            del env[key]
    try:
        done = subprocess.run(
            ["cargo", "build", "--release", "--quiet", "--manifest-path", str(dest / "Cargo.toml")],
            capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env=env,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"building the driver against {crate} {version} took over {BUILD_TIMEOUT_S} s.") from None
    if done.returncode != 0:
        raise RuntimeError(f"building the driver against {crate} {version} failed: {_cargo_error(done.stderr)}.")
    binary = target / "release" / name
    if not binary.is_file():
        raise RuntimeError(f"cargo built no binary at {binary}.")
    args = [str(arg) for arg in bug.get("args", [])]
    return {
        "argv": [str(binary), *args],
        "user_code": _crate_source_dir(dest, crate, version, env),
        # The driver's sources as the binary's line tables name them: the user's view.
        "cwd": str(dest),
    }


PERF_TIMEOUT_S = 600
PERF_RATE_HZ = 499


def culprit_share(variant: dict, bug: dict, out_dir: pathlib.Path) -> float | None:
    """The share of perf's samples (an independent sampler, DWARF call graphs, inlined frames
    expanded) whose stack holds a fix line: the issue's bar is 30%. None when perf is missing
    or recorded nothing.

    perf names a frame's source by file name and line only, so a fix line matches a frame
    with the same file name and line; the crate's other files rarely share both."""
    perf = shutil.which("perf")
    if perf is None:
        return None
    data = pathlib.Path(out_dir) / "perf.data"
    record = [perf, "record", "-q", "-F", str(PERF_RATE_HZ), "-g", "--call-graph", "dwarf,32768",
              "-o", str(data), "--", *variant["argv"]]
    try:
        subprocess.run(record, cwd=variant["cwd"], timeout=PERF_TIMEOUT_S,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        script = subprocess.run([perf, "script", "-i", str(data), "-F", "comm,ip,sym,srcline", "--inline"],
                                capture_output=True, text=True, timeout=PERF_TIMEOUT_S)
    except (subprocess.TimeoutExpired, OSError):
        return None
    finally:
        data.unlink(missing_ok=True)
    wanted = set()
    for location in bug["fix_lines"]:
        path, _, line = location.rpartition(":")
        wanted.add(f"{pathlib.PurePath(path).name}:{line}")
    total = hits = 0
    # A sample is a header line, then one "ip symbol" line and one "file:line" line per frame,
    # then a blank line.
    for sample in script.stdout.split("\n\n"):
        lines = sample.strip("\n").splitlines()
        if not lines:
            continue
        total += 1
        sources = {line.strip().split(" ")[0] for line in lines[1:] if not line.startswith("\t")}
        if sources & wanted:
            hits += 1
    return hits / total if total else None


if __name__ == "__main__":
    # Hand check: `crates.py BUG_DIR VARIANT WORK` builds one variant and prints the result.
    import sys

    if len(sys.argv) != 4:
        sys.exit("usage: crates.py BUG_DIR slow|fixed WORK")
    bug_path = pathlib.Path(sys.argv[1])
    try:
        bug_toml = tomllib.loads((bug_path / "bug.toml").read_text())
        print(json.dumps(build(bug_path, bug_toml, sys.argv[2], pathlib.Path(sys.argv[3]))))
    except (RuntimeError, OSError, tomllib.TOMLDecodeError) as err:
        sys.exit(f"crates.py: {err}")
