# bash completion for dblock. Subcommands, options and option values are read from the installed
# dblock's own --help as you type, so they are always those of that version. After `run ... --`
# the words are the guarded command's, completed as commands and files.

# Prints "dblock WORDS... --help" (empty on any error).
_dblock_help() { "$_dblock_program" "$@" --help 2>/dev/null; }
# Prints the names under "Subcommands:" in that help, one a line.
_dblock_subcommands() {
  _dblock_help "$@" | awk '/^Subcommands:/ { on = 1; next } /^[^ ]/ { on = 0 } on && /^  [a-z]/ { print $1 }'
}

_dblock() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
  local _dblock_program=${COMP_WORDS[0]}
  local -a path=()
  local word i subs
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    if [[ $word == -- ]]; then
      if ((i == COMP_CWORD - 1)); then
        mapfile -t COMPREPLY < <(compgen -c -- "$cur")
      else
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
      fi
      return 0
    fi
    [[ $word == -* ]] && continue
    subs=$(_dblock_subcommands "${path[@]}")
    if grep -qxF -- "$word" <<< "$subs"; then path+=("$word"); fi
  done

  local help
  help=$(_dblock_help "${path[@]}")
  # Global options are accepted after a subcommand too.
  ((${#path[@]} == 0)) || help+=$'\n'$(_dblock_help)

  # The value of an option that lists its choices: "--mode TEXT:{table,advisory}".
  if [[ $prev == --* ]]; then
    local choices
    choices=$(grep -oE -- "^  (-[a-zA-Z],)?${prev}[ ][A-Z]+:\{[^}]*\}" <<< "$help" | head -n 1 | sed -E 's/.*\{(.*)\}/\1/; s/,/ /g')
    if [[ -n $choices ]]; then
      mapfile -t COMPREPLY < <(compgen -W "$choices" -- "$cur")
      return 0
    fi
    # An option that takes a value of its own (its help line names a type): nothing to offer.
    if grep -qE -- "^  (-[a-zA-Z],)?${prev}[ ][A-Z]" <<< "$help"; then
      COMPREPLY=()
      return 0
    fi
  fi

  if [[ $cur == -* ]]; then
    local options
    options=$(grep -oE -- '^  (-[a-zA-Z],)?--[a-z][a-z-]*' <<< "$help" | sed -E 's/^  (-[a-zA-Z],)?//' | sort -u)
    mapfile -t COMPREPLY < <(compgen -W "$options" -- "$cur")
  else
    subs=$(_dblock_subcommands "${path[@]}")
    mapfile -t COMPREPLY < <(compgen -W "$subs" -- "$cur")
  fi
}
complete -F _dblock dblock
