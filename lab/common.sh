# Shared helpers for the lab run scripts (sourced, not executed).
#
#   lab_init NAME                 make a private temp dir ($LAB_TMP), set traps so
#                                 every helper service is stopped and the temp dir
#                                 removed on exit, error, Ctrl-C or SIGTERM
#   lab_start_service NAME CMD... start CMD in the background; CMD must write the
#                                 port it listens on (127.0.0.1) to $LAB_TMP/NAME.port;
#                                 waits (bounded) until that port accepts connections,
#                                 then sets LAB_PORT
#
# Services are started with `--port-file FILE` appended to CMD.

LAB_PY="${PYTHON:-python3}"
LAB_PIDS=()
LAB_TMP=""
LAB_START_TIMEOUT="${LAB_START_TIMEOUT:-15}"   # seconds to wait for a service port

lab_cleanup() {
    local pid
    for pid in "${LAB_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${LAB_PIDS[@]}"; do
        # bounded wait: up to ~3 s, then SIGKILL
        local i
        for i in $(seq 1 30); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    LAB_PIDS=()
    if [[ -n "$LAB_TMP" && -d "$LAB_TMP" ]]; then
        rm -rf -- "$LAB_TMP"
    fi
}

lab_init() {
    LAB_TMP="$(mktemp -d "${TMPDIR:-/tmp}/onefix-lab-$1.XXXXXX")"
    trap lab_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
}

lab_start_service() {
    local name="$1"; shift
    local port_file="$LAB_TMP/$name.port"
    "$@" --port-file "$port_file" &
    local pid=$!
    LAB_PIDS+=("$pid")
    local tries=$(( LAB_START_TIMEOUT * 10 ))
    local i
    for (( i = 0; i < tries; i++ )); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$name: exited before listening" >&2
            return 1
        fi
        if [[ -s "$port_file" ]]; then
            LAB_PORT="$(tr -dc '0-9' < "$port_file")"
            if [[ -n "$LAB_PORT" ]] && (exec 3<>"/dev/tcp/127.0.0.1/$LAB_PORT") 2>/dev/null; then
                return 0
            fi
        fi
        sleep 0.1
    done
    echo "$name: not listening after ${LAB_START_TIMEOUT}s" >&2
    return 1
}
