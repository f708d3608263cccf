# Sourced by tools/testdb.sh: a three-node MariaDB Galera cluster on loopback.

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
  install -d -o mysql -g mysql "$node/tmp"  # outside the datadir, which SST replaces; see launch_my
  setsid /usr/sbin/mariadbd --no-defaults --datadir="$node/data" --user=mysql --tmpdir="$node/tmp" \
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

stop_galera() {
  local n
  for n in 3 2 1; do stop_pid TERM "$DIR/galera$n/mysqld.pid"; done
}
