#!/usr/bin/env bash
# The project's test command (README): formatting, vet, the race-enabled test
# suite, then the ordering end-to-end tests repeated many times.
set -euo pipefail
cd "$(dirname "$0")/.."

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.peers/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...
go test -race ./...
# Ordering under load (issue: router core): every update before its
# response, per-session order kept, none lost.
go test -race -count="${ORDERING_COUNT:-200}" -run 'TestOrdering' ./test/
