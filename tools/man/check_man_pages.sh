#!/usr/bin/env bash
# usage: check_man_pages.sh DBLOCK [MANDIR]
# For "dblock" and every subcommand its --help lists (recursively), checks that the manual page
# exists and names exactly the options that command's --help names. Pages are read with
# `man -l MANDIR/PAGE.1.gz`, or with `man PAGE` (the installed pages) when MANDIR is not given.
set -euo pipefail
dblock=$1 mandir=${2:-}
export LC_ALL=C MANWIDTH=120  # ASCII hyphens, no hyphenation of option names
failures=0 pages=0

source "$(dirname "$0")/cli_help.sh"

check() {
  local page=dblock words="$*" from_help from_man rendered
  [ $# -eq 0 ] || page="dblock-${words// /-}"
  from_help=$("$dblock" "$@" --help | grep -oE -- '^  (-[a-zA-Z],)?--[a-z][a-z-]*' | sed -E 's/^  //' | sort)
  if [ -n "$mandir" ]; then rendered=$(man -l "$mandir/$page.1.gz" 2>&1) || rendered=""
  else rendered=$(man "$page" 2>&1) || rendered=""; fi
  if [ -z "$rendered" ]; then
    echo "no manual page $page for \"dblock${words:+ $words}\"" >&2; failures=$((failures + 1))
  else
    from_man=$(grep -oE -- '^       (-[a-zA-Z],)?--[a-z][a-z-]*' <<< "$rendered" | sed -E 's/^ +//' | sort)
    if [ "$from_help" != "$from_man" ]; then
      echo "$page lists other options than \"dblock${words:+ $words} --help\":" >&2
      diff <(echo "$from_help") <(echo "$from_man") >&2 || true
      failures=$((failures + 1))
    fi
  fi
  pages=$((pages + 1))
  local sub
  for sub in $(subcommands "$@"); do check "$@" "$sub"; done
}

check
[ "$failures" -eq 0 ] || { echo "$failures of $pages manual pages differ from the CLI's help" >&2; exit 1; }
echo "$pages manual pages name the options of the CLI's help"
