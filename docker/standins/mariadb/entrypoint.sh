#!/bin/bash
# The stand-in's entrypoint: on an empty datadir, mariadb-install-db, then a server on a private
# socket without networking creates the database and the user (so nothing answers on TCP before
# they exist), and stops; then the server on every address of the container. Runs as root, as
# the official entrypoint starts: the client logs in as root through the socket (unix_socket
# authentication), and mariadbd drops to the mysql user itself (--user).
set -euo pipefail
datadir=/var/lib/mysql
mkdir -p "$datadir" /run/mysqld
chown mysql:mysql "$datadir" /run/mysqld
[ "${1:-}" = mariadbd ] && shift
literal() { local s=${1//\\/\\\\}; printf "'%s'" "${s//\'/\\\'}"; }
identifier() { printf '`%s`' "${1//\`/\`\`}"; }
if [ ! -d "$datadir/mysql" ]; then
  user=${MARIADB_USER:-${MYSQL_USER:-}}
  password=${MARIADB_PASSWORD:-${MYSQL_PASSWORD:-}}
  database=${MARIADB_DATABASE:-${MYSQL_DATABASE:-}}
  root_password=${MARIADB_ROOT_PASSWORD:-${MYSQL_ROOT_PASSWORD:-}}
  mariadb-install-db --user=mysql --datadir="$datadir" --auth-root-authentication-method=socket --skip-test-db > /dev/null
  socket=/run/mysqld/init.sock
  mariadbd --user=mysql --datadir="$datadir" --skip-networking --socket="$socket" > /dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    mariadb-admin --socket="$socket" --silent ping > /dev/null 2>&1 && break
    kill -0 "$pid" 2> /dev/null || { echo "stand-in mariadb: the initialising server died" >&2; exit 1; }
    sleep 0.1
  done
  {
    [ -z "$database" ] || echo "CREATE DATABASE IF NOT EXISTS $(identifier "$database");"
    if [ -n "$user" ]; then
      echo "CREATE USER $(literal "$user")@'%' IDENTIFIED BY $(literal "$password");"
      [ -z "$database" ] || echo "GRANT ALL ON $(identifier "$database").* TO $(literal "$user")@'%';"
    fi
    # Without a root password root logs in through the socket only, as with MARIADB_RANDOM_ROOT_PASSWORD.
    [ -z "$root_password" ] ||
      echo "ALTER USER root@localhost IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD($(literal "$root_password"));"
  } | mariadb --socket="$socket"
  mariadb-admin --socket="$socket" shutdown
  wait "$pid" || true
  echo "stand-in mariadb: initialised $datadir (user ${user:-none}, database ${database:-none})"
fi
exec mariadbd --user=mysql --datadir="$datadir" --bind-address=0.0.0.0 --port=3306 "$@"
