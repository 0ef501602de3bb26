"""audit_logger: handles audit events; each request reconfigures logging.
Planted: logging.config.dictConfig(...) called per request. Expected: repeated-setup."""
import logging
import logging.config
import os
import random
import tempfile
import time

LOG_DIR = tempfile.mkdtemp(prefix="audit-")
LOGCFG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "audit": {"format": "%(asctime)s AUDIT %(message)s", "datefmt": "%Y-%m-%dT%H:%M:%S"},
    },
    "handlers": {
        "file": {"class": "logging.FileHandler", "filename": os.path.join(LOG_DIR, "app.log"),
                 "formatter": "plain", "level": "INFO"},
        "audit": {"class": "logging.FileHandler", "filename": os.path.join(LOG_DIR, "audit.log"),
                  "formatter": "audit", "level": "INFO"},
    },
    "loggers": {
        "app": {"handlers": ["file"], "level": "INFO", "propagate": False},
        "app.audit": {"handlers": ["audit"], "level": "INFO", "propagate": False},
        "app.db": {"handlers": ["file"], "level": "WARNING", "propagate": False},
        "app.http": {"handlers": ["file"], "level": "INFO", "propagate": False},
    },
}


def score(event):
    s = 0
    for k, v in event.items():
        s += len(k) * (v if isinstance(v, int) else len(str(v)))
    return s % 97


def handle_request(event):
    logging.config.dictConfig(LOGCFG)  # CULPRIT
    log = logging.getLogger("app.audit")
    risk = score(event)
    log.info("user=%s action=%s risk=%d", event["user"], event["action"], risk)
    return risk


def main():
    rng = random.Random(7)
    deadline = time.monotonic() + 8
    n = 0
    total = 0
    while n < 40000 and time.monotonic() < deadline:
        ev = {"user": f"u{rng.randrange(500)}", "action": rng.choice(["login", "read", "write", "delete"]),
              "bytes": rng.randrange(10_000), "ip": f"10.0.{rng.randrange(255)}.{rng.randrange(255)}"}
        total += handle_request(ev)
        n += 1
    logging.shutdown()
    print(f"handled {n} events, total risk {total}, logs in {LOG_DIR}")


if __name__ == "__main__":
    main()
