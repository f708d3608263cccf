#!/usr/bin/env bash
# The main job in one command, on a fresh Debian 12 machine with no database server: installs
# what is missing, builds the dblock CLI (preset release) once, and runs it with your arguments.
# With no --dsn and no DBLOCK_DSN it uses the embedded SQLite file /var/lib/dblock/dblock.db (root's;
# another user's is ~/.local/state/dblock/dblock.db).
#   tools/run.sh run --name nightly-report --ttl 30s -- sh -c 'echo token $DBLOCK_FENCING_TOKEN'
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/tools/deps.sh"
install_missing "${DBLOCK_BUILD_PACKAGES[@]}"
if [ ! -x "$root/build/release/dblock" ] || [ -n "$(find "$root/src" "$root/include" "$root/tools/dblock" "$root/migrations" -newer "$root/build/release/dblock" -type f -print -quit)" ]; then
  (cd "$root" && cmake --preset release -DDBLOCK_BUILD_TESTS=OFF > /dev/null && cmake --build --preset release >&2)
fi
exec "$root/build/release/dblock" "$@"
