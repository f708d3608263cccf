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
  setsid /usr/sbin/mariadbd --no-defaults --datadir="$DIR/my/data" --user=mysql \
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

# Galera: node N lives in $DIR/galeraN with four ports (SQL, group communication, IST, SST) in
# $DIR/galeraN/ports. Node 1 bootstraps the cluster; 2 and 3 join it and receive its data by rsync
# SST, which runs as the node's user: the nodes run as mysql and own their (empty) datadirs.
galera_ports() { cat "$DIR/galera$1/ports"; }
galera_sql_port() { galera_ports "$1" | cut -d' ' -f1; }
galera_socket() { echo "$DIR/galera$1/mysqld.sock"; }
galera_sql() { mariadb --no-defaults --socket="$(galera_socket "$1")" -uroot -N -B -e "$2"; }
galera_status() { galera_sql "$1" "SHOW GLOBAL STATUS LIKE '$2'" 2>/dev/null | cut -f2; }
galera_running() { [ -f "$DIR/galera$1/mysqld.pid" ] && kill -0 "$(cat "$DIR/galera$1/mysqld.pid")" 2>/dev/null; }

launch_galera_node() {
  local n=$1 bootstrap=${2:-} node="$DIR/galera$1" sql gcomm ist sst cluster="" i
  read -r sql gcomm ist sst < "$node/ports"
  for i in 1 2 3; do cluster+="${cluster:+,}127.0.0.1:$(galera_ports "$i" | cut -d' ' -f2)"; done
  setsid /usr/sbin/mariadbd --no-defaults --datadir="$node/data" --user=mysql \
    --bind-address=127.0.0.1 --port="$sql" --socket="$node/mysqld.sock" --pid-file="$node/mysqld.pid" \
    --log-error="$node/error.log" --skip-name-resolve \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci \
    --innodb-flush-log-at-trx-commit=2 --innodb-buffer-pool-size=32M --max-connections=300 \
    --binlog-format=ROW --innodb-autoinc-lock-mode=2 --default-storage-engine=InnoDB \
    --wsrep-on=ON --wsrep-provider=/usr/lib/galera/libgalera_smm.so --wsrep-cluster-name=dblock-galera \
    --wsrep-cluster-address="gcomm://$cluster" --wsrep-node-name="node$n" \
    --wsrep-node-address=127.0.0.1 --wsrep-node-incoming-address="127.0.0.1:$sql" \
    --wsrep-provider-options="gmcast.listen_addr=tcp://127.0.0.1:$gcomm;ist.recv_addr=127.0.0.1:$ist;gcache.size=32M;evs.suspect_timeout=PT3S;evs.inactive_timeout=PT5S;evs.install_timeout=PT5S" \
    --wsrep-sst-method=rsync --wsrep-sst-receive-address="127.0.0.1:$sst" \
    ${bootstrap:+--wsrep-new-cluster} < /dev/null > /dev/null 2>&1 9>&- &
  local launcher=$!
  for _ in $(seq 1 2400); do
    [ "$(galera_status "$n" wsrep_ready)" = ON ] && return 0
    kill -0 "$launcher" 2>/dev/null || { tail -40 "$node/error.log" >&2; die "Galera node $n did not start"; }
    sleep 0.05
  done
  tail -40 "$node/error.log" >&2
  die "Galera node $n was not ready within 120 s"
}

start_galera() {
  [ -x /usr/lib/galera/libgalera_smm.so ] || [ -f /usr/lib/galera/libgalera_smm.so ] \
    || die "Galera is not installed (apt-get install galera-4 rsync)"
  local n last=25433 port ports
  for n in 1 2 3; do
    if [ ! -f "$DIR/galera$n/ports" ]; then
      mkdir -p "$DIR/galera$n/data"
      ports=""
      for _ in 1 2 3 4; do
        port=$(pick_port_after "$last"); claim_port "$port"; last=$port; ports+="${ports:+ }$port"
      done
      echo "$ports" > "$DIR/galera$n/ports"
      chown -R mysql:mysql "$DIR/galera$n"
    fi
    last=$(galera_ports "$n" | cut -d' ' -f4)
  done
  if ! galera_running 1; then
    if [ ! -d "$DIR/galera1/data/mysql" ]; then
      mariadb-install-db --no-defaults --datadir="$DIR/galera1/data" --user=mysql --auth-root-authentication-method=normal \
        --skip-test-db --skip-name-resolve > "$DIR/galera1/install.log" 2>&1 \
        || { cat "$DIR/galera1/install.log" >&2; die "mariadb-install-db failed"; }
      local fresh=1
    fi
    launch_galera_node 1 bootstrap
    if [ -n "${fresh:-}" ]; then
      galera_sql 1 "CREATE DATABASE dblock CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
                    CREATE USER 'dblock'@'%' IDENTIFIED BY '$PW'; GRANT ALL ON *.* TO 'dblock'@'%' WITH GRANT OPTION;"
    fi
  fi
  for n in 2 3; do galera_running "$n" || launch_galera_node "$n"; done
  for _ in $(seq 1 600); do
    [ "$(galera_status 1 wsrep_cluster_size)" = 3 ] && return 0
    sleep 0.1
  done
  die "the Galera cluster did not reach three nodes"
}

print_galera_env() {
  local dsns="" n
  for n in 1 2 3; do dsns+="${dsns:+ }mysql://dblock:$PW@127.0.0.1:$(galera_sql_port "$n")/dblock"; done
  echo "export DBLOCK_TEST_GALERA_DSNS='$dsns'"
  echo "export DBLOCK_TEST_GALERA_DSN='${dsns%% *}'"
  echo "export DBLOCK_TEST_GALERA_DIR='$DIR'"
}

# Patroni: members node1 and node2 and a Raft-only witness in $DIR/patroni, all as user postgres.
# Ports in $DIR/patroni/ports: pg1 pg2 rest1 rest2 raft1 raft2 raft3.
PATRONI_SU_PW=patroni-su-pw
patroni_port() { cut -d' ' -f"$1" "$DIR/patroni/ports"; }
patroni_leader() {  # node1 or node2, or nothing
  timeout 10 patronictl -c "$DIR/patroni/ctl.yml" list -f json 2>/dev/null \
    | python3 -c 'import json,sys; print(next((m["Member"] for m in json.load(sys.stdin) if m["Role"] == "Leader" and m["State"] == "running"), ""))' 2>/dev/null || true
}
patroni_healthy() {  # a running leader and a streaming replica (Sync Standby in synchronous mode)
  timeout 10 patronictl -c "$DIR/patroni/ctl.yml" list -f json 2>/dev/null | python3 -c '
import json, sys
members = json.load(sys.stdin)
leaders = [m for m in members if m["Role"] == "Leader" and m["State"] == "running"]
replicas = [m for m in members if m["Role"] in ("Sync Standby", "Replica") and m["State"] in ("running", "streaming")]
sys.exit(0 if len(leaders) == 1 and len(replicas) == 1 and (sys.argv[1] == "async" or replicas[0]["Role"] == "Sync Standby") else 1)' "$(cat "$DIR/patroni/mode")"
}
wait_patroni_healthy() {
  for _ in $(seq 1 1200); do patroni_healthy && return 0; sleep 0.1; done
  tail -30 "$DIR/patroni/node1.log" "$DIR/patroni/node2.log" >&2
  die "Patroni did not reach a leader and a replica within 120 s"
}
# The whole group's output goes to the log: a caller reading ours (popen) must not wait for it.
launch_patroni_member() {
  (cd "$DIR/patroni" && exec setsid runuser -u postgres -- patroni "$DIR/patroni/$1.yml") \
    >> "$DIR/patroni/$1.log" 2>&1 < /dev/null 9>&- &
}
write_patroni_config() {
  local n=$1 other=$((3 - $1)) sync=true
  [ "$(cat "$DIR/patroni/mode")" = async ] && sync=false
  cat > "$DIR/patroni/node$n.yml" <<YAML
scope: dblock-ha
name: node$n
log: {level: WARNING}
restapi: {listen: 127.0.0.1:$(patroni_port $((n + 2))), connect_address: 127.0.0.1:$(patroni_port $((n + 2)))}
raft:
  data_dir: $DIR/patroni/node$n/raft
  self_addr: 127.0.0.1:$(patroni_port $((n + 4)))
  partner_addrs: ['127.0.0.1:$(patroni_port $((other + 4)))', '127.0.0.1:$(patroni_port 7)']
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 2
    retry_timeout: 3
    maximum_lag_on_failover: 1048576
    synchronous_mode: $sync
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters: {wal_level: replica, hot_standby: 'on', wal_log_hints: 'on', max_wal_senders: 10, max_replication_slots: 10, shared_buffers: 32MB, max_connections: 200}
  initdb: [{encoding: UTF8}, {auth-local: trust}, {auth-host: scram-sha-256}]
postgresql:
  listen: 127.0.0.1:$(patroni_port "$n")
  connect_address: 127.0.0.1:$(patroni_port "$n")
  data_dir: $DIR/patroni/node$n/data
  bin_dir: $(pg_bin)
  pgpass: $DIR/patroni/node$n/pgpass
  authentication:
    superuser: {username: postgres, password: $PATRONI_SU_PW}
    replication: {username: replicator, password: replpass}
    rewind: {username: rewinder, password: rewindpass}
  parameters: {unix_socket_directories: '$DIR/patroni/node$n', password_encryption: scram-sha-256}
  pg_hba:
  - local all all trust
  - host replication replicator 127.0.0.1/32 scram-sha-256
  - host all all 127.0.0.1/32 scram-sha-256
YAML
}
start_patroni() {
  command -v patroni > /dev/null || die "Patroni is not installed (apt-get install patroni python3-pysyncobj)"
  local mode=${1:-sync} last=25433 ports="" port n
  if [ ! -f "$DIR/patroni/ports" ]; then
    mkdir -p "$DIR/patroni/node1" "$DIR/patroni/node2" "$DIR/patroni/witness"
    for _ in 1 2 3 4 5 6 7; do port=$(pick_port_after "$last"); claim_port "$port"; last=$port; ports+="${ports:+ }$port"; done
    echo "$ports" > "$DIR/patroni/ports"
    echo "$mode" > "$DIR/patroni/mode"
    for n in 1 2; do write_patroni_config "$n"; done
    cat > "$DIR/patroni/witness.yml" <<YAML
raft: {data_dir: $DIR/patroni/witness, self_addr: '127.0.0.1:$(patroni_port 7)', partner_addrs: ['127.0.0.1:$(patroni_port 5)', '127.0.0.1:$(patroni_port 6)']}
YAML
    cat > "$DIR/patroni/ctl.yml" <<YAML
scope: dblock-ha
raft: {partner_addrs: ['127.0.0.1:$(patroni_port 5)', '127.0.0.1:$(patroni_port 6)', '127.0.0.1:$(patroni_port 7)']}
YAML
    chown -R postgres:postgres "$DIR/patroni"; chmod 700 "$DIR/patroni/node1" "$DIR/patroni/node2"
  fi
  (cd "$DIR/patroni" && exec setsid runuser -u postgres -- patroni_raft_controller "$DIR/patroni/witness.yml") \
    >> "$DIR/patroni/witness.log" 2>&1 < /dev/null 9>&- &
  launch_patroni_member node1
  launch_patroni_member node2
  wait_patroni_healthy
  local leader; leader=$(patroni_leader)
  PGPASSWORD=$PATRONI_SU_PW psql -X -q -h 127.0.0.1 -p "$(patroni_port "${leader#node}")" -U postgres -d postgres \
    -c "DO \$\$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'dblock') THEN CREATE ROLE dblock LOGIN PASSWORD '$PW'; END IF; END\$\$" > /dev/null
  PGPASSWORD=$PATRONI_SU_PW psql -X -q -h 127.0.0.1 -p "$(patroni_port "${leader#node}")" -U postgres -d postgres -tA \
    -c "SELECT 1 FROM pg_database WHERE datname = 'dblock'" | grep -q 1 \
    || PGPASSWORD=$PATRONI_SU_PW psql -X -q -h 127.0.0.1 -p "$(patroni_port "${leader#node}")" -U postgres -d postgres \
         -c "CREATE DATABASE dblock OWNER dblock" > /dev/null
  # libpq does not try a multi-host URI's next host after a server refused the login, and the
  # standby replays the new database a little after the primary committed it: wait for both.
  local n
  for n in 1 2; do
    for _ in $(seq 1 300); do
      PGPASSWORD=$PATRONI_SU_PW psql -X -q -h 127.0.0.1 -p "$(patroni_port "$n")" -U postgres -d postgres -tA \
        -c "SELECT 1 FROM pg_database WHERE datname = 'dblock'" 2>/dev/null | grep -q 1 && break
      sleep 0.1
    done
  done
}
print_patroni_env() {
  echo "export DBLOCK_TEST_PATRONI_DSN='postgresql://dblock:$PW@127.0.0.1:$(patroni_port 1),127.0.0.1:$(patroni_port 2)/dblock?target_session_attrs=read-write&connect_timeout=2'"
}
patroni_switchover() {
  local leader candidate
  leader=$(patroni_leader); [ -n "$leader" ] || die "no Patroni leader"
  candidate=node$((3 - ${leader#node}))
  timeout 60 patronictl -c "$DIR/patroni/ctl.yml" switchover --force --leader "$leader" --candidate "$candidate" dblock-ha > /dev/null \
    || die "switchover failed"
  for _ in $(seq 1 600); do [ "$(patroni_leader)" = "$candidate" ] && break; sleep 0.1; done
  [ "$(patroni_leader)" = "$candidate" ] || die "$candidate did not become the leader"
  # In synchronous mode only a Sync Standby may be promoted: wait until the old leader is one again.
  wait_patroni_healthy
}
patroni_kill_leader() {
  local leader pid
  leader=$(patroni_leader); [ -n "$leader" ] || die "no Patroni leader"
  echo "$leader" > "$DIR/patroni/killed"
  pid=$(pgrep -u postgres -f "patroni $DIR/patroni/$leader.yml" | head -1)
  [ -n "$pid" ] && kill -KILL "$pid"
  [ -f "$DIR/patroni/$leader/data/postmaster.pid" ] && kill -KILL "$(head -1 "$DIR/patroni/$leader/data/postmaster.pid")" 2>/dev/null
  true
}
stop_patroni() {
  [ -d "$DIR/patroni" ] || return 0
  local pid
  for pid in $(pgrep -u postgres -f "patroni $DIR/patroni/node[12].yml"); do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in $(pgrep -u postgres -f "patroni $DIR/patroni/node[12].yml"); do wait_gone "$pid"; done
  for n in 1 2; do stop_pid INT "$DIR/patroni/node$n/data/postmaster.pid"; done
  for pid in $(pgrep -u postgres -f "patroni_raft_controller $DIR/patroni/witness.yml"); do kill -TERM "$pid" 2>/dev/null || true; wait_gone "$pid"; done
}

stop_galera() {
  local n
  for n in 3 2 1; do stop_pid TERM "$DIR/galera$n/mysqld.pid"; done
}

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
