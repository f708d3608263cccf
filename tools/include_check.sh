#!/usr/bin/env bash
# Finds #includes of dblock's own headers ("...", <dblock/...>) in src/ that the including file does
# not use, by include-what-you-use (Debian's iwyu) over every source file in compile_commands.json.
# Only those are findings: what iwyu says of the standard library's and other libraries' headers
# (libstdc++'s internal <bits/...>, spdlog's and fmt's layout) is left to the compiler. A header is
# checked with its own .cpp (iwyu's "associated header"); an include that must stay for a reason
# iwyu cannot see carries `// IWYU pragma: keep` and says why.
#   tools/include_check.sh [BUILD_DIR]   compile_commands.json is read from BUILD_DIR (default build/dev)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/dev}
[ -f "$build/compile_commands.json" ] || { echo "$build/compile_commands.json is missing: configure that build first" >&2; exit 1; }
command -v iwyu_tool > /dev/null || { echo "iwyu_tool is missing: tools/deps.sh installs Debian's iwyu" >&2; exit 1; }
mapfile -t sources < <(git ls-files 'src/*.cpp')
# iwyu exits non-zero whenever it suggests anything: its report decides.
report=$(iwyu_tool -p "$build" -j "$(nproc)" "${sources[@]}" -- -Xiwyu --no_fwd_decls -Xiwyu --quoted_includes_first \
           -Xiwyu --cxx17ns 2>&1 || true)
# Crashes or a file iwyu could not parse would otherwise look like a clean report.
if grep -E '^(fatal )?error: |Assertion|Stack dump' <<< "$report" > /dev/null; then
  grep -E -B2 -A5 '^(fatal )?error: |Assertion|Stack dump' <<< "$report" | head -60 >&2
  echo "include-what-you-use could not check every file (above)" >&2
  exit 1
fi
unused=$(awk '
  / should remove these lines:$/ { file = $1; removing = 1; next }
  removing && /^$/ { removing = 0 }
  removing && /^- #include ("|<dblock\/)/ { sub(/^- /, ""); print file ": " $0 }
' <<< "$report" | sed "s|^$PWD/||" | sort -u)
if [ -n "$unused" ]; then
  echo "$unused"
  echo "the files above include dblock headers they do not use (include-what-you-use); remove them, or mark one that must stay with // IWYU pragma: keep and say why" >&2
  exit 1
fi
echo "includes: every #include of a dblock header in src/ is used (${#sources[@]} sources)"
