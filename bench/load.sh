#!/usr/bin/env bash
# Load generator benchmark: `onefix load` against wrk (Debian) and oha (crates.io, when
# installed: `cargo install oha --locked`, or OHA=/path/to/oha) on the same loopback servers with
# the same connections and duration: nginx with one worker, a one-thread hyper server, and a
# hyper server that stalls 100 ms every second (coordinated omission).
#
#   bench/load.sh                  # DURATION=10 CONNS=32 ROUNDS=3 by default
#   DURATION=5 ROUNDS=1 bench/load.sh
#
# Prints Markdown tables (the figures in BENCHMARKS-load.md come from here).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v wrk >/dev/null || ! command -v nginx >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq wrk nginx-light >/dev/null
fi
cargo build --release -q -p onefix || [ -n "${SKIP_BUILD:-}" ]
cargo build --release -q -p onefix-load --example load_server

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

nginx_port=$(free_port)
cat > "$work/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $work/nginx.pid;
error_log $work/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 100000000;
    keepalive_timeout 120s;
    server {
        listen 127.0.0.1:$nginx_port;
        location / { return 200 "Hello, world!"; }
    }
}
CONF
nginx -c "$work/nginx.conf" -p "$work" &
pids+=($!)

hyper_port=$(free_port)
target/release/examples/load_server "$hyper_port" 1 >/dev/null &
pids+=($!)
stall_port=$(free_port)
target/release/examples/load_server "$stall_port" 1 1000 >/dev/null &
pids+=($!)

for port in "$nginx_port" "$hyper_port" "$stall_port"; do
    for _ in $(seq 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
    done
done

python3 bench/load_run.py "http://127.0.0.1:$nginx_port/" "http://127.0.0.1:$hyper_port/" "http://127.0.0.1:$stall_port/"
