#!/usr/bin/env bash
# Measures what the router costs at startup (issue: router core):
#   - initialize: time from the editor's initialize to the router's answer;
#   - session: time to the first session/new answer;
#   - idle RSS of the router process (not its agents) with one open session.
# Two configs: config.example.yaml as shipped (its agent runs through
# `go run`, which compiles on every start) and the same agent prebuilt, which
# isolates the router from the agent's own startup.
# Usage: scripts/measure-startup.sh [RUNS]   (default 7; prints medians)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-7}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/acp-router" ./cmd/acp-router
go build -o "$tmp/agent" github.com/coder/acp-go-sdk/example/agent
cat > "$tmp/prebuilt.yaml" <<YAML
version: 1
state_dir: $tmp/state
agents:
  - name: example
    command: $tmp/agent
YAML

now() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

measure() { # config -> lines "init_ms session_ms rss_kib"
  local cfg=$1
  for _ in $(seq "$runs"); do
    coproc R { exec "$tmp/acp-router" --config "$cfg" --log-level error; }
    local pid=$R_PID t0 t1 t2 line
    t0=$(now)
    printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}' >&"${R[1]}"
    read -r line <&"${R[0]}"
    t1=$(now)
    printf '%s\n' "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"session/new\",\"params\":{\"cwd\":\"$PWD\",\"mcpServers\":[]}}" >&"${R[1]}"
    while read -r line <&"${R[0]}"; do [[ $line == *'"id":2'* ]] && break; done
    t2=$(now)
    sleep 1
    local rss
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
    exec {R[1]}>&-
    wait "$pid" || true
    echo "$(( (t1 - t0) / 1000000 )) $(( (t2 - t1) / 1000000 )) $rss"
  done
}

report() {
  local name=$1 file=$2
  printf '%-34s initialize %5s ms   session/new %5s ms   idle RSS %6s KiB   (median of %s)\n' "$name" \
    "$(cut -d' ' -f1 "$file" | median)" "$(cut -d' ' -f2 "$file" | median)" "$(cut -d' ' -f3 "$file" | median)" "$runs"
}

measure config.example.yaml > "$tmp/example.txt"
measure "$tmp/prebuilt.yaml" > "$tmp/prebuilt.txt"
report "config.example.yaml (go run)" "$tmp/example.txt"
report "example agent prebuilt" "$tmp/prebuilt.txt"
