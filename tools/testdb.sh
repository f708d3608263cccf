#!/usr/bin/env bash
# Throwaway database servers on loopback for the tests, in a temp dir.
#   tools/testdb.sh start [DIR]   start (idempotent) and print the DSNs as shell exports
#   tools/testdb.sh env [DIR]     print the DSNs of running servers
#   tools/testdb.sh stop [DIR]    stop the servers started in DIR (by PID) and remove DIR
#   tools/testdb.sh pg-crash DIR  stop PostgreSQL like a crash (pg_ctl stop -m immediate)
#   tools/testdb.sh pg-start DIR  start it again on the same port (after pg-crash)
# DIR defaults to $DBLOCK_TESTDB_DIR or /tmp/dblock-testdb. Port: $DBLOCK_PGPORT, else the first
# free one from 55433.
set -euo pipefail
cmd=${1:-}
DIR=${2:-${DBLOCK_TESTDB_DIR:-/tmp/dblock-testdb}}
PW=${DBLOCK_TEST_PASSWORD:-dblockpw}

die() { echo "testdb.sh: $*" >&2; exit 1; }
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
wait_gone() {
  local pid=$1 t=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.05; t=$((t + 1)); [ $t -lt 600 ] || die "pid $pid did not exit"
  done
}
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# The port is chosen at start (first free from 55433, or $DBLOCK_PGPORT) and remembered in DIR.
pick_port() {
  if [ -n "${DBLOCK_PGPORT:-}" ]; then echo "$DBLOCK_PGPORT"; return; fi
  local port
  for port in $(seq 55433 55533); do port_busy "$port" || { echo "$port"; return; }; done
  die "no free port in 55433-55533"
}
pg_running() { [ -f "$DIR/pg/data/postmaster.pid" ] && kill -0 "$(head -1 "$DIR/pg/data/postmaster.pid")" 2>/dev/null; }

print_env() {
  [ -f "$DIR/pgport" ] || die "no servers started in $DIR"
  local PGPORT; PGPORT=$(cat "$DIR/pgport")
  echo "export DBLOCK_TEST_PG_DSN='postgresql://dblock:$PW@127.0.0.1:$PGPORT/dblock'"
  echo "export DBLOCK_TEST_PG_ADMIN='host=$DIR/pg port=$PGPORT user=dblock dbname=dblock'"
}

start_pg() {
  pg_running && return 0
  local bin; bin=$(pg_bin); [ -n "$bin" ] || die "PostgreSQL is not installed (apt-get install postgresql)"
  local PGPORT; PGPORT=$(pick_port)
  port_busy "$PGPORT" && die "port $PGPORT is taken by another process; set DBLOCK_PGPORT"
  rm -rf "$DIR/pg"; mkdir -p "$DIR/pg"; chown postgres:postgres "$DIR/pg"
  printf '%s\n' "$PW" > "$DIR/pg/pwfile"; chown postgres "$DIR/pg/pwfile"; chmod 600 "$DIR/pg/pwfile"
  runuser -u postgres -- "$bin/initdb" -D "$DIR/pg/data" -U dblock --pwfile="$DIR/pg/pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 --no-sync > "$DIR/pg/initdb.log" 2>&1 \
    || { cat "$DIR/pg/initdb.log" >&2; die "initdb failed"; }
  rm -f "$DIR/pg/pwfile"
  pg_ctl_start "$bin" "$PGPORT"
  runuser -u postgres -- "$bin/psql" -X -q -h "$DIR/pg" -p "$PGPORT" -U dblock -d postgres -c "CREATE DATABASE dblock"
  echo "$PGPORT" > "$DIR/pgport"
}

pg_ctl_start() {
  runuser -u postgres -- "$1/pg_ctl" -D "$DIR/pg/data" -l "$DIR/pg/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $2 -k $DIR/pg -c max_connections=300" start > /dev/null \
    || { cat "$DIR/pg/server.log" >&2; die "PostgreSQL did not start"; }
}

stop_pg() {
  if pg_running; then
    local pid; pid=$(head -1 "$DIR/pg/data/postmaster.pid")
    kill -INT "$pid" 2>/dev/null || true   # SIGINT = fast shutdown
    wait_gone "$pid"
  fi
}

case $cmd in
  start)
    [ "$(id -u)" = 0 ] || die "run as root (initdb runs as user postgres through runuser)"
    [ ${#DIR} -lt 80 ] || die "DIR '$DIR' is too long for a unix socket path"
    mkdir -p "$DIR"; chmod 755 "$DIR"
    start_pg
    print_env ;;
  env) print_env ;;
  pg-crash)
    pg_running || die "no PostgreSQL running in $DIR"
    runuser -u postgres -- "$(pg_bin)/pg_ctl" -D "$DIR/pg/data" -m immediate -w stop > /dev/null ;;
  pg-start)
    pg_running || pg_ctl_start "$(pg_bin)" "$(cat "$DIR/pgport")" ;;
  stop)
    stop_pg
    rm -rf "$DIR" ;;
  *) die "usage: testdb.sh start|env|stop|pg-crash|pg-start [DIR]" ;;
esac
