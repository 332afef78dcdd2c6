#!/usr/bin/env bash
# Generates the Python protobuf and gRPC stubs of the shardd v1 API
# (proto/shardd/v1/*.proto) into client/python/shardd/v1/, for users and
# tests that do not build with Bazel.
#
# The generated modules import each other as `shardd.v1.<name>_pb2`, the
# proto package's own path; generating them inside our `shardd` package
# makes those imports resolve with client/python on sys.path, so nothing
# needs rewriting. The folder is git-ignored: the .proto files are the
# source of truth.
#
# Needs protoc and grpc_python_plugin (Debian: protobuf-compiler,
# protobuf-compiler-grpc; scripts/install-deps installs both). Debian's
# python3-grpc-tools is from 2018 and is not used.
#
#   client/python/gen_stubs.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
plugin=$(command -v grpc_python_plugin) || {
  echo "gen_stubs: grpc_python_plugin not found (apt-get install protobuf-compiler-grpc)" >&2
  exit 1
}
out="$here/shardd/v1"
# Generate into a fresh folder and swap it in, so that a concurrent reader
# never sees half a set of stubs and a removed .proto leaves no stale module.
tmp=$(mktemp -d "$here/.stubs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
protoc -I "$repo/proto" --python_out="$tmp" --grpc_python_out="$tmp" \
  --plugin=protoc-gen-grpc_python="$plugin" "$repo"/proto/shardd/v1/*.proto
cat >"$tmp/shardd/v1/__init__.py" <<'PY'
"""Generated stubs of the shardd v1 API (client/python/gen_stubs.sh)."""
PY
rm -rf "$out.old"
[[ -d "$out" ]] && mv "$out" "$out.old"
mv "$tmp/shardd/v1" "$out"
rm -rf "$out.old"
