#!/usr/bin/env bash
# The project's test command (README): it installs the real peers the
# end-to-end tests run (into ignored folders), then checks formatting, vet,
# the race-enabled test suite, and the ordering tests repeated many times.
set -euo pipefail
cd "$(dirname "$0")/.."

# The ACP Go SDK's example agent and client (go.mod tool dependencies).
go build -o /dev/null github.com/coder/acp-go-sdk/example/agent github.com/coder/acp-go-sdk/example/client

# Gemini CLI, a real coding agent the end-to-end tests run behind the router
# against a fake Gemini API on loopback (test/gemini_test.go). Installed from
# npm into an ignored folder; kept when already at this version. Its install
# scripts (node-pty, keytar) are not needed for --acp.
gemini_version=0.61.0
gemini_prefix=.peers/gemini
installed=$(node -p "require('./$gemini_prefix/node_modules/@google/gemini-cli/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$gemini_version" ]; then
  npm install --no-audit --no-fund --ignore-scripts --prefix "$gemini_prefix" "@google/gemini-cli@$gemini_version"
fi
export ACP_E2E_GEMINI="$PWD/$gemini_prefix/node_modules/.bin/gemini"
unset ACP_E2E_NO_GEMINI # the Gemini tests never skip here

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.peers/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...
go tool staticcheck ./...
go test -race ./...
# Ordering under load (issue: router core): every update before its
# response, per-session order kept, none lost.
go test -race -count="${ORDERING_COUNT:-200}" -run 'TestOrdering' ./test/
