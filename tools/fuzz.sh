#!/usr/bin/env bash
# Builds the parser fuzz target with clang (libFuzzer + ASan + UBSan) and runs it for a while.
#   tools/fuzz.sh [SECONDS] [WORKDIR]      (default 20 s; tools/test.sh runs it briefly)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-20}
work=${2:-$(mktemp -d /tmp/dblock-fuzz.XXXXXX)}
mkdir -p "$work/corpus"
cp "$root"/tests/fuzz/corpus/* "$work/corpus/"
clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/src" -I"$root/include" \
  "$root/tests/fuzz/parsers_fuzz.cpp" "$root/src/base/uri.cpp" "$root/src/base/duration.cpp" \
  "$root/src/base/validate.cpp" "$root/src/base/errors.cpp" -lfmt -o "$work/parsers_fuzz"
"$work/parsers_fuzz" -artifact_prefix="$work/" -max_total_time="$seconds" -max_len=512 -print_final_stats=1 "$work/corpus" 2>&1 | tail -6
