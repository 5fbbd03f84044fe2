#!/usr/bin/env bash
# Builds the ring parser's libFuzzer target with clang (Debian: apt-get install clang-14
# libclang-rt-14-dev) and AddressSanitizer, outside Bazel (whose toolchain here is gcc).
#   messaging/fuzz/build_fuzzer.sh [output]      # default: /tmp/ring_fuzzer
#   /tmp/ring_fuzzer -max_total_time=60
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/ring_fuzzer}
cxx=$(command -v clang++ || command -v clang++-14 || true)
[ -n "$cxx" ] || { echo "clang++ not found: apt-get install clang-14 libclang-rt-14-dev" >&2; exit 2; }
"$cxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -I. \
  messaging/fuzz/ring_fuzz.cc messaging/ring.cc platform/sync_point.cc -o "$out" \
  -labsl_status -labsl_statusor -labsl_strings -labsl_str_format_internal -labsl_time -labsl_time_zone \
  -labsl_int128 -labsl_cord -labsl_cord_internal -labsl_cordz_info -labsl_cordz_handle \
  -labsl_cordz_functions -labsl_strings_internal -labsl_raw_logging_internal \
  -labsl_throw_delegate -labsl_base -labsl_spinlock_wait -labsl_synchronization \
  -labsl_stacktrace -labsl_symbolize -labsl_malloc_internal -labsl_debugging_internal \
  -labsl_demangle_internal -labsl_bad_optional_access -labsl_exponential_biased \
  -labsl_strerror -labsl_graphcycles_internal -labsl_log_severity -labsl_civil_time
echo "built $out; run: $out -max_total_time=60"
