#!/usr/bin/env bash
# Throwaway database servers on loopback for the tests, in a temp dir.
#   tools/testdb.sh start [DIR]   start (idempotent) and print the DSNs as shell exports
#   tools/testdb.sh env [DIR]     print the DSNs of running servers
#   tools/testdb.sh stop [DIR]    stop the servers started in DIR (by PID) and remove DIR
#   tools/testdb.sh pg-crash DIR  stop PostgreSQL like a crash (pg_ctl stop -m immediate)
#   tools/testdb.sh pg-start DIR  start it again on the same port (after pg-crash)
#   tools/testdb.sh start-replicated DIR   a primary plus a synchronous streaming replica; prints
#                                 DBLOCK_TEST_PG_FAILOVER_DSN (multi-host, target_session_attrs=read-write)
#   tools/testdb.sh promote DIR   promote the replica (after pg-crash of the primary)
# `start` also starts MariaDB (DBLOCK_TEST_MYSQL_DSN) and PgBouncer in transaction mode in front of PostgreSQL when it is installed
# (DBLOCK_TEST_PGBOUNCER_DSN): advisory mode must refuse to work through it.
#   tools/testdb.sh my-crash DIR  kill MariaDB like a crash (SIGKILL); my-start DIR starts it again
#   tools/testdb.sh start-galera DIR   a three-node MariaDB Galera cluster (Debian's galera-4, rsync
#                                 SST, nodes run as mysql); prints DBLOCK_TEST_GALERA_DSNS (node 1 2 3,
#                                 space-separated) and DBLOCK_TEST_GALERA_DSN (node 1)
#   tools/testdb.sh galera-isolate DIR N / galera-rejoin DIR N   cut node N off the cluster's group
#                                 communication (gmcast.isolate) and let it back in
#   tools/testdb.sh start-patroni DIR  PostgreSQL under Patroni (built-in Raft, a Raft-only witness,
#                                 synchronous_mode; `async` as third argument: asynchronous): prints
#                                 DBLOCK_TEST_PATRONI_DSN (multi-host, target_session_attrs=read-write)
#   tools/testdb.sh patroni-switchover DIR   hand the leader role to the other member and wait for it
#   tools/testdb.sh patroni-kill-leader DIR  SIGKILL the leader's Patroni and postmaster (a crash)
#   tools/testdb.sh patroni-restart DIR      start the killed member again (it rejoins as a replica)
#   tools/testdb.sh patroni-pause-replication DIR   stop the leader's WAL senders (SIGSTOP): lag on
#                                 demand, until patroni-kill-leader
# DIR defaults to $DBLOCK_TESTDB_DIR or /tmp/dblock-testdb. Ports: $DBLOCK_PGPORT / $DBLOCK_MYPORT,
# else the first free ones from 25433.
set -euo pipefail
cmd=${1:-}
DIR=${2:-${DBLOCK_TESTDB_DIR:-/tmp/dblock-testdb}}
PW=${DBLOCK_TEST_PASSWORD:-dblockpw}

die() { echo "testdb.sh: $*" >&2; exit 1; }
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
# Signals the process in a pid file and waits until it is gone (nothing to do when it is not running).
stop_pid() {
  local signal=$1 pid_file=$2 pid
  [ -f "$pid_file" ] || return 0
  pid=$(head -1 "$pid_file")
  kill -0 "$pid" 2>/dev/null || return 0
  kill "-$signal" "$pid" 2>/dev/null || true
  wait_gone "$pid"
}
wait_gone() {
  local pid=$1 t=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.05; t=$((t + 1)); [ $t -lt 600 ] || die "pid $pid did not exit"
  done
}
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# The port is chosen at start (first free from 25433, or $DBLOCK_PGPORT) and remembered in DIR.
# Below Linux's ephemeral range (32768-60999): a port there can be free when checked and then be
# taken as the local port of any client connection before the server binds it.
# A port stays claimed by its cluster's DIR while the DIR exists, also while the server is down
# (crash tests): another cluster must not take it in between.
CLAIMS=/tmp/dblock-testdb-ports
port_claimed() { [ -f "$CLAIMS/$1" ] && [ -d "$(cat "$CLAIMS/$1")" ] && [ "$(cat "$CLAIMS/$1")" != "$DIR" ]; }
claim_port() { mkdir -p "$CLAIMS"; echo "$DIR" > "$CLAIMS/$1"; }
release_claims() { grep -lx -- "$DIR" "$CLAIMS"/* 2>/dev/null | xargs -r rm -f; }
port_free() { ! port_busy "$1" && ! port_claimed "$1"; }
pick_port() {
  if [ -n "${DBLOCK_PGPORT:-}" ]; then echo "$DBLOCK_PGPORT"; return; fi
  local port
  for port in $(seq 25433 25533); do port_free "$port" && { echo "$port"; return; }; done
  die "no free port in 25433-25533"
}
my_running() { [ -f "$DIR/my/mysqld.pid" ] && kill -0 "$(cat "$DIR/my/mysqld.pid")" 2>/dev/null; }
pg_running() { [ -f "$DIR/pg/data/postmaster.pid" ] && kill -0 "$(head -1 "$DIR/pg/data/postmaster.pid")" 2>/dev/null; }

print_env() {
  [ -f "$DIR/pgport" ] || die "no servers started in $DIR"
  local PGPORT; PGPORT=$(cat "$DIR/pgport")
  echo "export DBLOCK_TEST_PG_DSN='postgresql://dblock:$PW@127.0.0.1:$PGPORT/dblock'"
  echo "export DBLOCK_TEST_PG_ADMIN='host=$DIR/pg port=$PGPORT user=dblock dbname=dblock'"
  if [ -f "$DIR/myport" ]; then
    echo "export DBLOCK_TEST_MYSQL_DSN='mysql://dblock:$PW@127.0.0.1:$(cat "$DIR/myport")/dblock'"
    echo "export DBLOCK_TEST_MYSQL_ADMIN_SOCKET='$DIR/my/mysqld.sock'"
  fi
  if [ -f "$DIR/pgbouncerport" ]; then
    echo "export DBLOCK_TEST_PGBOUNCER_DSN='postgresql://dblock@127.0.0.1:$(cat "$DIR/pgbouncerport")/dblock'"
  fi
}

pgbouncer_running() { [ -f "$DIR/pgbouncer/pid" ] && kill -0 "$(cat "$DIR/pgbouncer/pid")" 2>/dev/null; }

start_pgbouncer() {
  command -v pgbouncer > /dev/null || return 0
  pgbouncer_running && return 0
  local pgport port
  pgport=$(cat "$DIR/pgport"); port=$(pick_port_after "$pgport")
  claim_port "$port"
  mkdir -p "$DIR/pgbouncer"
  cat > "$DIR/pgbouncer/pgbouncer.ini" <<EOF_INI
[databases]
dblock = host=127.0.0.1 port=$pgport dbname=dblock user=dblock password=$PW
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $DIR/pgbouncer/users.txt
pool_mode = transaction
default_pool_size = 16
logfile = $DIR/pgbouncer/pgbouncer.log
pidfile = $DIR/pgbouncer/pid
EOF_INI
  echo '"dblock" ""' > "$DIR/pgbouncer/users.txt"
  chown -R postgres:postgres "$DIR/pgbouncer"
  runuser -u postgres -- pgbouncer -d "$DIR/pgbouncer/pgbouncer.ini" > /dev/null 9>&- \
    || { cat "$DIR/pgbouncer/pgbouncer.log" >&2; die "PgBouncer did not start"; }
  for _ in $(seq 1 200); do port_busy "$port" && { echo "$port" > "$DIR/pgbouncerport"; return 0; }; sleep 0.05; done
  die "PgBouncer did not listen on $port"
}

stop_pgbouncer() { stop_pid INT "$DIR/pgbouncer/pid"; }

start_pg() {
  pg_running && return 0
  local bin; bin=$(pg_bin); [ -n "$bin" ] || die "PostgreSQL is not installed (apt-get install postgresql)"
  local PGPORT; PGPORT=$(pick_port)
  port_busy "$PGPORT" && die "port $PGPORT is taken by another process; set DBLOCK_PGPORT"
  claim_port "$PGPORT"
  rm -rf "$DIR/pg"; mkdir -p "$DIR/pg"; chown postgres:postgres "$DIR/pg"
  # Created unreadable to others from its first byte (umask), not chmod-ed after the write.
  (umask 077; printf '%s\n' "$PW" > "$DIR/pg/pwfile"); chown postgres "$DIR/pg/pwfile"
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
    -o "-c listen_addresses=127.0.0.1 -p $2 -k $DIR/pg -c max_connections=300" start > /dev/null 9>&- \
    || { cat "$DIR/pg/server.log" >&2; die "PostgreSQL did not start"; }
}

start_replicated() {
  start_pg
  local bin primary replica
  bin=$(pg_bin); primary=$(cat "$DIR/pgport")
  replica=$(pick_port_after "$primary")
  claim_port "$replica"
  runuser -u postgres -- "$bin/psql" -X -q -h "$DIR/pg" -p "$primary" -U dblock -d postgres \
    -c "ALTER SYSTEM SET wal_level = replica" -c "ALTER SYSTEM SET max_wal_senders = 5" > /dev/null
  stop_pg; pg_ctl_start "$bin" "$primary"
  mkdir -p "$DIR/replica"; chown postgres:postgres "$DIR/replica"
  PGPASSWORD=$PW runuser -u postgres -- env PGPASSWORD="$PW" "$bin/pg_basebackup" -h 127.0.0.1 -p "$primary" \
    -U dblock -D "$DIR/replica/data" -X stream -R > "$DIR/replica/basebackup.log" 2>&1 \
    || { cat "$DIR/replica/basebackup.log" >&2; die "pg_basebackup failed"; }
  printf "primary_conninfo = 'host=127.0.0.1 port=%s user=dblock password=%s application_name=replica'\n" \
    "$primary" "$PW" >> "$DIR/replica/data/postgresql.auto.conf"
  runuser -u postgres -- "$bin/pg_ctl" -D "$DIR/replica/data" -l "$DIR/replica/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $replica -k $DIR/replica -c max_connections=300" start > /dev/null 9>&- \
    || { cat "$DIR/replica/server.log" >&2; die "the replica did not start"; }
  echo "$replica" > "$DIR/replicaport"
  # Synchronous only now that the standby exists, else every commit on the primary would wait.
  runuser -u postgres -- "$bin/psql" -X -q -h "$DIR/pg" -p "$primary" -U dblock -d postgres \
    -c "ALTER SYSTEM SET synchronous_standby_names = '*'" -c "SELECT pg_reload_conf()" > /dev/null
  for _ in $(seq 1 600); do
    [ "$(runuser -u postgres -- "$bin/psql" -X -qAt -h "$DIR/pg" -p "$primary" -U dblock -d postgres \
         -c "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")" = 1 ] && return 0
    sleep 0.05
  done
  die "the replica never became synchronous"
}

# MariaDB 10.11: --no-defaults first (no /etc/mysql settings), utf8mb4, loopback only, started
# detached with its output closed so a caller capturing our output is not held open.
start_my() {
  my_running && return 0
  command -v mariadbd > /dev/null || [ -x /usr/sbin/mariadbd ] || die "MariaDB is not installed (apt-get install mariadb-server)"
  local port
  if [ -f "$DIR/myport" ]; then port=$(cat "$DIR/myport")
  elif [ -n "${DBLOCK_MYPORT:-}" ]; then port=$DBLOCK_MYPORT
  else port=$(pick_port_after "$(cat "$DIR/pgport")"); fi
  claim_port "$port"
  if [ ! -d "$DIR/my/data" ]; then
    rm -rf "$DIR/my"; mkdir -p "$DIR/my"; chown mysql:mysql "$DIR/my"
    mariadb-install-db --no-defaults --datadir="$DIR/my/data" --user=mysql --auth-root-authentication-method=normal \
      --skip-test-db --skip-name-resolve > "$DIR/my/install.log" 2>&1 \
      || { cat "$DIR/my/install.log" >&2; die "mariadb-install-db failed"; }
    local fresh=1
  fi
  launch_my "$port"
  if [ -n "${fresh:-}" ]; then
    mariadb --no-defaults --socket="$DIR/my/mysqld.sock" -uroot -e \
      "CREATE DATABASE dblock CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
       CREATE USER 'dblock'@'%' IDENTIFIED BY '$PW'; GRANT ALL ON *.* TO 'dblock'@'%' WITH GRANT OPTION;"
  fi
  echo "$port" > "$DIR/myport"
}

launch_my() {
  # A temp dir of its own: temp tables' files in the shared /tmp were seen deleted under a running
  # query (error 6 "Error on delete of '/tmp/#sql-temptable-…'") while other servers came and went.
  install -d -o mysql -g mysql "$DIR/my/tmp"
  setsid /usr/sbin/mariadbd --no-defaults --datadir="$DIR/my/data" --user=mysql --tmpdir="$DIR/my/tmp" \
    --bind-address=127.0.0.1 --port="$1" --socket="$DIR/my/mysqld.sock" --pid-file="$DIR/my/mysqld.pid" \
    --log-error="$DIR/my/error.log" --skip-name-resolve --skip-log-bin \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci \
    --innodb-flush-log-at-trx-commit=2 --innodb-buffer-pool-size=128M --max-connections=500 \
    < /dev/null > /dev/null 2>&1 9>&- &
  local launcher=$!
  for _ in $(seq 1 1200); do
    mariadb --no-defaults --socket="$DIR/my/mysqld.sock" -uroot -e 'SELECT 1' > /dev/null 2>&1 && return 0
    kill -0 "$launcher" 2>/dev/null || { cat "$DIR/my/error.log" >&2; die "MariaDB did not start"; }
    sleep 0.05
  done
  die "MariaDB did not accept connections within 60 s"
}

stop_my() { stop_pid TERM "$DIR/my/mysqld.pid"; }

pick_port_after() {
  local port
  for port in $(seq $(($1 + 1)) 25600); do port_free "$port" && { echo "$port"; return; }; done
  die "no free port after $1"
}

stop_pg() { stop_pid INT "$DIR/pg/data/postmaster.pid"; }  # SIGINT = fast shutdown

# Clusters (Galera, Patroni) in files of their own, sharing the helpers above.
source "$(dirname "${BASH_SOURCE[0]}")/testdb-galera.sh"
source "$(dirname "${BASH_SOURCE[0]}")/testdb-patroni.sh"

# Starts run one at a time on this machine: two clusters must not pick the same free port. The
# servers started under the lock must not inherit its descriptor (they would hold it forever), so
# every server is launched with 9>&-.
serialize_starts() { exec 9> /tmp/dblock-testdb.lock; flock 9; }

case $cmd in
  start)
    serialize_starts
    [ "$(id -u)" = 0 ] || die "run as root (initdb runs as user postgres through runuser)"
    [ ${#DIR} -lt 80 ] || die "DIR '$DIR' is too long for a unix socket path"
    mkdir -p "$DIR"; chmod 755 "$DIR"
    start_pg
    start_my
    start_pgbouncer
    print_env ;;
  env) print_env ;;
  pg-crash)
    pg_running || die "no PostgreSQL running in $DIR"
    runuser -u postgres -- "$(pg_bin)/pg_ctl" -D "$DIR/pg/data" -m immediate -w stop > /dev/null ;;
  pg-start)
    pg_running || pg_ctl_start "$(pg_bin)" "$(cat "$DIR/pgport")" ;;
  my-crash)
    my_running || die "no MariaDB running in $DIR"
    stop_pid KILL "$DIR/my/mysqld.pid" ;;
  my-start)
    my_running || launch_my "$(cat "$DIR/myport")" ;;
  start-replicated)
    serialize_starts
    [ "$(id -u)" = 0 ] || die "run as root (initdb runs as user postgres through runuser)"
    mkdir -p "$DIR"; chmod 755 "$DIR"
    start_replicated
    print_env
    echo "export DBLOCK_TEST_PG_FAILOVER_DSN='postgresql://dblock:$PW@127.0.0.1:$(cat "$DIR/pgport"),127.0.0.1:$(cat "$DIR/replicaport")/dblock?target_session_attrs=read-write'" ;;
  promote)
    runuser -u postgres -- "$(pg_bin)/pg_ctl" -D "$DIR/replica/data" -w promote > /dev/null ;;
  start-galera)
    serialize_starts
    [ "$(id -u)" = 0 ] || die "run as root (the nodes run as user mysql)"
    [ ${#DIR} -lt 80 ] || die "DIR '$DIR' is too long for a unix socket path"
    mkdir -p "$DIR"; chmod 755 "$DIR"
    start_galera
    print_galera_env ;;
  start-patroni)
    serialize_starts
    [ "$(id -u)" = 0 ] || die "run as root (Patroni runs as user postgres through runuser)"
    [ ${#DIR} -lt 80 ] || die "DIR '$DIR' is too long for a unix socket path"
    mkdir -p "$DIR"; chmod 755 "$DIR"
    start_patroni "${3:-sync}"
    print_patroni_env ;;
  patroni-switchover) patroni_switchover ;;
  patroni-kill-leader) patroni_kill_leader ;;
  patroni-pause-replication) patroni_pause_replication ;;
  patroni-restart)
    launch_patroni_member "$(cat "$DIR/patroni/killed")"
    wait_patroni_healthy ;;
  galera-isolate)
    galera_sql "${3:?node number}" "SET GLOBAL wsrep_provider_options = 'gmcast.isolate=1'" ;;
  galera-rejoin)
    galera_sql "${3:?node number}" "SET GLOBAL wsrep_provider_options = 'gmcast.isolate=0'" ;;
  stop)
    stop_patroni
    stop_galera
    stop_pgbouncer
    stop_pg
    stop_my
    stop_pid INT "$DIR/replica/data/postmaster.pid"
    release_claims
    rm -rf "$DIR" ;;
  *) die "usage: testdb.sh start|env|stop|pg-crash|pg-start|my-crash|my-start|start-replicated|promote|start-galera|galera-isolate|galera-rejoin [DIR]" ;;
esac
