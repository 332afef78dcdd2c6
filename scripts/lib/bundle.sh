# Shared by scripts/gpu-bundle and scripts/bench-bundle: copying built
# programs with the shared libraries a bare device machine lacks (it has no
# Bazel and no Debian libraries), and stripping debug information so that
# the bundle fits the device tool's 64 MiB carry limit.

# bundle_libs BINARY LIBDIR: copies the shared libraries BINARY loads into
# LIBDIR, except those the device machine brings (glibc's, libstdc++, the
# GPU driver's and NCCL).
bundle_libs() {
  local bin=$1 libdir=$2 lib
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|\
      libstdc++.so*|libgcc_s.so*|libcuda.so*|libnvidia*|libnccl.so*) ;;
      *) cp -Ln "$lib" "$libdir/" ;;
    esac
  done
}

# bundle_finish DIR: makes DIR writable, strips debug information from its
# ELF files (our binaries build with -g1, most of their size; the symbols
# stay, for backtraces), prints its size and fails when it is too close to
# the 64 MiB carry limit.
bundle_finish() {
  local dir=$1 f size_mb
  chmod -R u+w "$dir"
  find "$dir" -type f -print0 | while IFS= read -r -d '' f; do
    if [[ "$(head -c4 "$f" | od -An -c | tr -d ' ')" == 177ELF ]]; then
      strip --strip-debug "$f"
    fi
  done
  size_mb=$(du -sm "$dir" | cut -f1)
  echo "bundle: ${size_mb} MiB in ${dir}"
  if ((size_mb > 60)); then
    echo "bundle: ${size_mb} MiB is too close to the 64 MiB carry limit" >&2
    return 1
  fi
}
