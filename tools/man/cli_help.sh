# Sourced by make_man_pages.sh and check_man_pages.sh; needs $dblock, the CLI's path.
# subcommands WORD...: the names listed under "Subcommands:" in the help of "dblock WORD...".
subcommands() {
  "$dblock" "$@" --help | awk '/^Subcommands:/ { on = 1; next } /^[^ ]/ { on = 0 } on && /^  [a-z]/ { print $1 }'
}
