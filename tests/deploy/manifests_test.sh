#!/usr/bin/env bash
# Runs manifests_test.mjs under Node's test runner, with one JUnit test case
# per test for Bazel ($XML_OUTPUT_FILE). Fails, never skips, when node or
# the npm modules of deploy/validate are missing or stale.
set -uo pipefail
# The real paths: Node resolves deploy/validate's modules from the source
# tree, where scripts/install-deps installed node_modules.
test_file=$(readlink -f "$1")
lock=$(readlink -f "$2")
node_modules="$(dirname "$lock")/node_modules"
if ! command -v node >/dev/null; then
  echo "FAILED: node is not installed; run scripts/install-deps"
  exit 1
fi
# Tested with Node.js 20 (kubernetes-models 5 declares >= 22 but runs on
# 20; Debian 12's own Node.js 18 is untested).
if (($(node -p 'process.versions.node.split(".")[0]') < 20)); then
  echo "FAILED: node $(node --version) is older than 20, the version these tests run on"
  exit 1
fi
stamp="$node_modules/.shardd-package-lock.sha256"
if [[ ! -f $stamp || "$(cat "$stamp")" != "$(sha256sum "$lock" | cut -d' ' -f1)" ]]; then
  echo "FAILED: $node_modules is missing or older than package-lock.json; run scripts/install-deps"
  exit 1
fi
reporters=()
if [[ -n "${XML_OUTPUT_FILE:-}" ]] &&
  node -e 'import("node:test/reporters").then((r) => process.exit(r.junit ? 0 : 1))' 2>/dev/null; then
  reporters=(--test-reporter=spec --test-reporter-destination=stdout
    --test-reporter=junit "--test-reporter-destination=$XML_OUTPUT_FILE")
fi
exec node --test "${reporters[@]}" "$test_file"
