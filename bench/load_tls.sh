#!/usr/bin/env bash
# HTTPS and HTTP/2 load generator benchmark: `onefix load` against wrk (HTTPS), h2load (HTTP/2,
# Debian's nghttp2-client) and oha (when installed: `cargo install oha --locked`, or
# OHA=/path/to/oha) on one nginx (one worker) with a self-signed certificate on 127.0.0.1:
# HTTPS closed loop, HTTP/2 closed loop, HTTPS open loop at 1,000/s and 20,000/s, maximum RSS
# at 64 connections, and plain HTTP against wrk again (the fast path must not regress).
#
#   bench/load_tls.sh                  # DURATION=10 CONNS=32 ROUNDS=3 by default
#   DURATION=5 ROUNDS=1 bench/load_tls.sh
#
# Prints Markdown tables (the figures in BENCHMARKS.md come from here).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for tool in wrk nginx h2load openssl; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq wrk nginx-light nghttp2-client openssl >/dev/null
fi
cargo build --release -q -p onefix || [ -n "${SKIP_BUILD:-}" ]

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# A self-signed certificate for 127.0.0.1 and localhost (a leaf: webpki refuses a CA certificate
# served as the server's own).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -addext "basicConstraints=critical,CA:FALSE" -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
https_port=$(free_port)
h2_port=$(free_port)
plain_port=$(free_port)
# `listen ... http2` is what Debian 12's nginx 1.22 knows (`http2 on` came in 1.25).
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
    ssl_certificate $work/cert.pem;
    ssl_certificate_key $work/key.pem;
    server { listen 127.0.0.1:$https_port ssl; location / { return 200 "Hello, world!"; } }
    server { listen 127.0.0.1:$h2_port ssl http2; location / { return 200 "Hello, world!"; } }
    server { listen 127.0.0.1:$plain_port; location / { return 200 "Hello, world!"; } }
}
CONF
nginx -e "$work/error.log" -c "$work/nginx.conf" -p "$work" &
pids+=($!)
for port in "$https_port" "$h2_port" "$plain_port"; do
    for _ in $(seq 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
    done
done

python3 bench/load_tls_run.py "https://127.0.0.1:$https_port/" "https://127.0.0.1:$h2_port/" "http://127.0.0.1:$plain_port/"
