#!/usr/bin/env bash
# usage: completion_test.sh DBLOCK COMPLETION_SCRIPT
# Completes command lines with the bash completion the package installs and checks the offers.
set -euo pipefail
dblock_path=$1
# shellcheck source=/dev/null
source "$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ln -s "$(realpath "$dblock_path")" "$work/dblock"
failures=0

# expect "LINE" WORD...: completing LINE (the cursor at its end) offers every WORD.
# refuse "LINE" WORD...: completing LINE offers none of the WORDs.
complete_line() {
  read -r -a COMP_WORDS <<< "$1"
  [[ $1 == *" " ]] && COMP_WORDS+=("")
  COMP_WORDS[0]="$work/dblock"
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _dblock
  printf '%s\n' "${COMPREPLY[@]}"
}
expect() {
  local line=$1 offers word; shift
  offers=$(complete_line "$line")
  for word in "$@"; do
    grep -qxF -- "$word" <<< "$offers" || { echo "'$line' does not offer '$word'; it offers: $(echo $offers)" >&2; failures=$((failures + 1)); }
  done
}
refuse() {
  local line=$1 offers word; shift
  offers=$(complete_line "$line")
  for word in "$@"; do
    ! grep -qxF -- "$word" <<< "$offers" || { echo "'$line' offers '$word'" >&2; failures=$((failures + 1)); }
  done
}

expect "dblock r" run release reaper
refuse "dblock r" migrate locks
expect "dblock migrate " up status verify sql grants repair
expect "dblock run --t" --ttl
refuse "dblock run --t" --to
expect "dblock run --ds" --dsn                         # a global option after the subcommand
expect "dblock run --mode " table advisory
expect "dblock --log-format " text json
expect "dblock migrate sql --" --from --to
refuse "dblock run --name " run --ttl                   # a value comes next, not a word of dblock's
expect "dblock run --name nightly -- bas" bash         # the guarded command's words are commands
refuse "dblock run --name nightly -- bash --t" --ttl
[ "$failures" -eq 0 ] || { echo "$failures completion checks failed" >&2; exit 1; }
echo "bash completion offers what the CLI's help lists"
