# Sourced by tools/testdb.sh: PostgreSQL under Patroni on loopback.

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
    -c "SELECT 1 FROM pg_database WHERE datname = 'dblock'" | grep 1 > /dev/null \
    || PGPASSWORD=$PATRONI_SU_PW psql -X -q -h 127.0.0.1 -p "$(patroni_port "${leader#node}")" -U postgres -d postgres \
         -c "CREATE DATABASE dblock OWNER dblock" > /dev/null
  # libpq does not try a multi-host URI's next host after a server refused the login, and the
  # standby replays the new database a little after the primary committed it: wait for both.
  local n
  for n in 1 2; do
    for _ in $(seq 1 300); do
      PGPASSWORD=$PATRONI_SU_PW psql -X -q -h 127.0.0.1 -p "$(patroni_port "$n")" -U postgres -d postgres -tA \
        -c "SELECT 1 FROM pg_database WHERE datname = 'dblock'" 2>/dev/null | grep 1 > /dev/null && break
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
  # Like a machine that dies: the postmaster and every backend and WAL sender at once.
  if [ -f "$DIR/patroni/$leader/data/postmaster.pid" ]; then
    pid=$(head -1 "$DIR/patroni/$leader/data/postmaster.pid")
    pkill -KILL -P "$pid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
  fi
  true
}
# The leader's WAL senders stopped (SIGSTOP): what the primary commits from now on is not sent to
# the standby, as under asynchronous replication's lag, until the leader is killed.
patroni_pause_replication() {
  local leader postmaster
  leader=$(patroni_leader); [ -n "$leader" ] || die "no Patroni leader"
  postmaster=$(head -1 "$DIR/patroni/$leader/data/postmaster.pid")
  pkill -STOP -P "$postmaster" -f walsender || die "no WAL sender on $leader"
}
stop_patroni() {
  [ -d "$DIR/patroni" ] || return 0
  local pid
  for pid in $(pgrep -u postgres -f "patroni $DIR/patroni/node[12].yml"); do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in $(pgrep -u postgres -f "patroni $DIR/patroni/node[12].yml"); do wait_gone "$pid"; done
  for n in 1 2; do stop_pid INT "$DIR/patroni/node$n/data/postmaster.pid"; done
  for pid in $(pgrep -u postgres -f "patroni_raft_controller $DIR/patroni/witness.yml"); do kill -TERM "$pid" 2>/dev/null || true; wait_gone "$pid"; done
}
