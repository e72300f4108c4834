#!/usr/bin/env bash
# The benchmark of BENCHMARKS.md (issue 6, part 2).
#   scripts/bench.sh [FLAGS]          end to end: direct vs byte relay vs acp-router, interleaved,
#                                     medians and targets (flags: go run ./cmd/acp-router-bench -h)
#   scripts/bench.sh micro [COUNT]    the hot paths' Go micro-benchmarks (router, acp), then CPU
#                                     profiles of one 200 B and one 1 MiB update through the relay
# It installs @agentclientprotocol/sdk@1.9.0 into the ignored .peers/sdk19 when missing (needs
# Node.js and npm; without them the TypeScript agent's rows say why they were skipped).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" != micro ]; then
  exec go run ./cmd/acp-router-bench "$@"
fi

count=${2:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
go test -run '^$' -bench . -benchmem -count "$count" ./router/ ./acp/
for size in 200B 1MiB; do
  go test -run '^$' -bench "ForwardUpdate/$size/verbatim\$" -cpuprofile "$out/$size.prof" -o "$out/router.test" ./router/ > /dev/null
  echo
  echo "== CPU profile: one $size session/update through the router (BenchmarkForwardUpdate/$size/verbatim)"
  go tool pprof -top -nodecount 15 "$out/router.test" "$out/$size.prof" 2>/dev/null | sed -n '/flat%/,$p'
  echo "-- encoding/json.Unmarshal by caller:"
  go tool pprof -peek 'encoding/json.Unmarshal$' "$out/router.test" "$out/$size.prof" 2>/dev/null | grep -E '^ +[0-9.]+m?s +[0-9.]+% \|' || true
done
