#!/usr/bin/env bash
# usage: make_man_pages.sh DBLOCK VERSION OUTDIR
# Writes OUTDIR/dblock.1.gz and a page per subcommand (dblock-run.1.gz, dblock-migrate-up.1.gz, ...), each
# made by help2man from that command's own --help, walking the "Subcommands:" lists, so neither the
# set of pages nor their options can drift from the CLI.
set -euo pipefail
dblock=$(realpath "$1") version=$2 out=$3
mkdir -p "$out"
rm -f "$out"/dblock*.1 "$out"/dblock*.1.gz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

source "$(dirname "$0")/cli_help.sh"

page() {  # page WORD...: the page of "dblock WORD..."
  local page_name=dblock command_words="$*" description see_also
  [ $# -eq 0 ] || page_name="dblock-${command_words// /-}"
  description=$("$dblock" "$@" --help | head -n 1)
  description=${description#dblock: }
  # help2man runs a program by its name; this one is "dblock WORD..." under the page's name.
  printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$dblock" "$command_words" > "$work/$page_name"
  chmod +x "$work/$page_name"
  see_also="$work/$page_name.h2m"
  {
    echo "[SEE ALSO]"
    if [ $# -eq 0 ]; then
      for sub in $(subcommands); do echo ".BR dblock-$sub (1),"; done
      echo "and /usr/share/doc/dblock for the guarantees, the schema and the deployment guides."
    else
      echo ".BR dblock (1)"
      echo "for the options every subcommand takes (--dsn, --log-level, --log-format)."
    fi
  } > "$see_also"
  help2man --no-info --section 1 --version-string "$version" --name "$description" \
           --include "$see_also" --output "$out/$page_name.1" "$work/$page_name"
  gzip -9nf "$out/$page_name.1"  # as Debian installs them; -n: no time stamp, the same bytes each build
  local sub
  for sub in $(subcommands "$@"); do page "$@" "$sub"; done
}

page
