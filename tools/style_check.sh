#!/usr/bin/env bash
# Holds every line of C++ changed since the style baseline (the commit in tools/style-baseline),
# committed or not, to .clang-format and .clang-tidy. Lines older than the baseline are left as
# they are until someone changes them, so the check never asks for a tree-wide reformat.
#   tools/style_check.sh [BUILD_DIR]   compile_commands.json is read from BUILD_DIR (default build/dev)
#   tools/style_check.sh --fix         reformats the changed lines in place (clang-tidy is not run)
# Needs Debian's clang-format and clang-tidy (tools/deps.sh installs them). Exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
base=$(cat tools/style-baseline)
git cat-file -e "$base^{commit}" 2>/dev/null || { echo "style baseline $base is not in this clone's history" >&2; exit 1; }
changed_lines() {
  git diff -U0 --no-color "$base" -- 'src/*.cpp' 'src/*.hpp' 'include/*.hpp' 'tools/*.cpp' 'tools/*.hpp' \
    'tests/*.cpp' 'tests/*.hpp' 'examples/*.cpp'
}
if [ "${1-}" = --fix ]; then changed_lines | clang-format-diff-14 -p1 -i; exit 0; fi
build=${1:-build/dev}
[ -f "$build/compile_commands.json" ] || { echo "$build/compile_commands.json is missing: configure that build first" >&2; exit 1; }

formatting=$(changed_lines | clang-format-diff-14 -p1)
if [ -n "$formatting" ]; then
  echo "$formatting"
  echo "lines changed since $base are not formatted as .clang-format says; tools/style_check.sh --fix formats them" >&2
  exit 1
fi
# clang-tidy-diff reports on the changed lines only, but does not fail by itself: its output decides.
# asio 1.22 enables coroutines for clang only when told to (GCC's are found on their own). What clang
# itself says of code GCC compiles is left out ([clang-diagnostic-*]: e.g. clang 14 cannot parse
# libstdc++ 12's std::views::split): the compiler's warnings are GCC's, under -Werror, in every build.
findings=$(changed_lines | clang-tidy-diff-14.py -p1 -path "$build" -j "$(nproc)" -quiet -iregex '.*\.cpp' \
             -extra-arg=-Wno-unknown-warning-option -extra-arg=-DASIO_HAS_CO_AWAIT=1 \
             -extra-arg=-DASIO_HAS_STD_COROUTINE=1 2>&1 | grep -E '(warning|error): ' | grep -v '\[clang-diagnostic-' || true)
if [ -n "$findings" ]; then
  echo "$findings"
  echo "clang-tidy (.clang-tidy) found the above in lines changed since $base" >&2
  exit 1
fi
echo "style: the lines changed since ${base:0:12} are formatted and clang-tidy clean"
