#!/usr/bin/env bash
# dblock next to its peers on this machine's own servers (tools/peers/peers.py says how).
# Installs what is missing (python3-tooz and its drivers from Debian, advisory-lock from npm into a
# temp dir), builds the release CLI, starts servers with tools/testdb.sh unless DBLOCK_TEST_PG_DSN
# and DBLOCK_TEST_MYSQL_DSN are set, migrates dblock's tables under the prefix peers_, and prints
# the table (or JSON with --json). Extra arguments go to peers.py (--rounds N, --seconds S).
# DBLOCK_PEERS_CLI=path/to/dblock measures that CLI instead and builds nothing.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
source "$root/tools/deps.sh"
install_missing "${DBLOCK_BUILD_PACKAGES[@]}" python3-tooz python3-psycopg2 python3-pymysql
# Debian's nodejs and npm, unless a node with its npm is there already (NodeSource's conflicts with them).
{ command -v node && command -v npm; } > /dev/null || install_missing nodejs npm
work="$(mktemp -d /tmp/dblock-peers.XXXXXX)"
servers=""
cleanup() {
  if [ -n "$servers" ]; then
    "$root/tools/testdb.sh" stop "$servers" > /dev/null 2>&1 || true
    rm -rf "$servers"
  fi
  rm -rf "$work"
}
trap cleanup EXIT
(cd "$work" && npm init -y > /dev/null && npm install --silent --no-audit --no-fund advisory-lock@2.0.0 pg@8 > /dev/null)
dblock="${DBLOCK_PEERS_CLI:-}"
if [ -z "$dblock" ]; then
  (cd "$root" && cmake --preset release > /dev/null && cmake --build --preset release --target dblock_cli > /dev/null)
  dblock="$root/build/release/dblock"
fi
if [ -z "${DBLOCK_TEST_PG_DSN:-}" ] || [ -z "${DBLOCK_TEST_MYSQL_DSN:-}" ]; then
  install_missing "${DBLOCK_TEST_PACKAGES[@]}"
  # Not under $work: mktemp -d makes that 0700 and root's, and the servers run as postgres and
  # mysql, which could not enter it (initdb could not read its password file). testdb.sh makes
  # this directory 0755 and keeps the password file the postgres user's alone (0600).
  servers="$(mktemp -d /tmp/dblock-peers-db.XXXXXX)"
  eval "$("$root/tools/testdb.sh" start "$servers")"
fi
pg="$DBLOCK_TEST_PG_DSN?prefix=peers_&pool=32"
my="$DBLOCK_TEST_MYSQL_DSN?prefix=peers_&pool=32"
"$dblock" --dsn "$pg" migrate up > /dev/null
"$dblock" --dsn "$my" migrate up > /dev/null
/usr/bin/python3 "$root/tools/peers/peers.py" --dblock "$dblock" --pg "$pg" --mysql "$my" --node-dir "$work" "$@"
