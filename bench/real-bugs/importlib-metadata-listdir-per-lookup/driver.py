"""A service's /health endpoint reports the installed version of each component it depends on,
asking importlib_metadata.version() per component on every request, as plugin hosts and
diagnostics pages do. Each lookup searches every sys.path directory for the distribution's
metadata (importlib_metadata 3.8.0 caches each directory's listing until the directory changes)."""

import importlib_metadata

COMPONENTS = ["pip", "setuptools", "zipp", "importlib-metadata", "pip", "zipp"]
REQUESTS = 400


def health():
    versions = {}
    for name in COMPONENTS:
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def main():
    reports = [health() for _ in range(REQUESTS)]
    print(f"served {len(reports)} health reports: {reports[-1]}")


if __name__ == "__main__":
    main()
