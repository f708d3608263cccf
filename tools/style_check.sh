#!/usr/bin/env bash
# Holds every C++ file to .clang-format (the whole tree was formatted once, in one mechanical
# commit), every line changed since the style baseline (the commit in tools/style-baseline),
# committed or not, to .clang-tidy (over the whole tree it would cost about an hour of CPU per run;
# the baseline moves up to a landed commit, whose own run checked every line it changed, so that a
# run pays for its round's changes, not for every round's since the first),
# and src/ to tools/include_check.sh (no #include of one of dblock's own headers that is not used).
#   tools/style_check.sh [BUILD_DIR]   compile_commands.json is read from BUILD_DIR (default build/dev)
#   tools/style_check.sh --fix         formats every file in place (nothing else is run)
# Needs Debian's clang-format, clang-tidy and iwyu (tools/deps.sh installs them). Exits non-zero on
# any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
base=$(cat tools/style-baseline)
git cat-file -e "$base^{commit}" 2>/dev/null || { echo "style baseline $base is not in this clone's history" >&2; exit 1; }
changed_lines() {
  git diff -U0 --no-color "$base" -- 'src/*.cpp' 'src/*.hpp' 'include/*.hpp' 'tools/*.cpp' 'tools/*.hpp' \
    'tests/*.cpp' 'tests/*.hpp' 'examples/*.cpp'
}
cpp_files() {
  git ls-files 'src/*.cpp' 'src/*.hpp' 'include/*.hpp' 'tools/*.cpp' 'tools/*.hpp' 'tests/*.cpp' 'tests/*.hpp' \
    'examples/*.cpp'
  git ls-files --others --exclude-standard 'src/*.cpp' 'src/*.hpp' 'include/*.hpp' 'tools/*.cpp' 'tools/*.hpp' \
    'tests/*.cpp' 'tests/*.hpp' 'examples/*.cpp'
}
if [ "${1-}" = --fix ]; then cpp_files | xargs clang-format-14 -i; exit 0; fi
build=${1:-build/dev}
[ -f "$build/compile_commands.json" ] || { echo "$build/compile_commands.json is missing: configure that build first" >&2; exit 1; }

unformatted=$(cpp_files | xargs clang-format-14 --dry-run 2>&1 | grep -E '^[^ ]+:[0-9]+:[0-9]+: (warning|error): ' \
                | cut -d: -f1 | sort -u || true)
if [ -n "$unformatted" ]; then
  echo "$unformatted"
  echo "the files above are not formatted as .clang-format says; tools/style_check.sh --fix formats them" >&2
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
tools/include_check.sh "$build"
echo "style: every file formatted, the lines changed since ${base:0:12} clang-tidy clean, src/'s includes used"
