#!/usr/bin/env bash
# Runs docs_test.py under pytest (one JUnit test case per test for Bazel).
#   docs_test.sh DOCS_TEST_PY SHARDD COORDINATOR README
# The links are checked in the source tree that README.md's runfile points
# to (its real path), since a link may name any file of the repository; the
# pages, the .proto files and the binaries are this test's data, so a
# change of any of them reruns it.
set -uo pipefail
test_py=$(readlink -f "$1")
export DOCS_SHARDD=$(readlink -f "$2")
export DOCS_COORDINATOR=$(readlink -f "$3")
export DOCS_ROOT=$(dirname "$(readlink -f "$4")")
if ! /usr/bin/python3 -c "import pytest" 2>/dev/null; then
  echo "FAILED: /usr/bin/python3 has no pytest; run scripts/install-deps"
  exit 1
fi
xml=()
[[ -n "${XML_OUTPUT_FILE:-}" ]] && xml=("--junitxml=$XML_OUTPUT_FILE")
cd "$(dirname "$test_py")"
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider "${xml[@]}" "$test_py"
