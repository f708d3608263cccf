# Sourced by tools/run.sh and tools/test.sh: installs the Debian packages that are missing.
# usage: install_missing pkg...
install_missing() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' > /dev/null || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  echo "installing Debian packages: ${missing[*]}" >&2
  $sudo apt-get update -qq >&2
  # Server packages must not start their system-wide services: the tests start their own servers.
  local policy=/usr/sbin/policy-rc.d guard=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" > /dev/null; $sudo chmod 755 "$policy"; guard=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null \
    || { [ -z "$guard" ] || $sudo rm -f "$policy"; return 1; }
  [ -z "$guard" ] || $sudo rm -f "$policy"
}

# What building dblock needs (no database server); help2man makes the manual pages, dpkg-dev and
# file let CPack build the Debian packages; prometheus-cpp-dev the optional Prometheus adapter;
# libasio-dev (standalone asio) the optional asio API, <dblock/asio.hpp>; ccache serves objects
# compiled before (cmake/CompilerCache.cmake); mold links (cmake/FastLinker.cmake).
DBLOCK_BUILD_PACKAGES=(cmake ninja-build g++ pkg-config libpq-dev libspdlog-dev libfmt-dev libcli11-dev
                       libsoci-dev libsqlite3-dev libcpp-httplib-dev libmysqlcppconn-dev libboost-dev
                       help2man dpkg-dev file prometheus-cpp-dev libasio-dev ccache mold)
# What the tests need on top: GoogleTest, the PostgreSQL and MariaDB servers, man and
# systemd-analyze to check the installed pages and units, and docker.io, mmdebstrap, iptables, curl
# and python3-yaml for tools/image_test.sh (its own dockerd; a base image made from Debian's archive);
# chromium loads the sidecar's status page headless (tests/observability).
DBLOCK_TEST_PACKAGES=(libgtest-dev libgmock-dev postgresql postgresql-client pgbouncer mariadb-server mariadb-client
                      galera-4 rsync lsof iproute2 patroni python3-pysyncobj sqlite3 docker-compose clang procps
                      libclang-rt-14-dev man-db systemd python3-psycopg python3-pymysql docker.io mmdebstrap
                      iptables curl python3-yaml chromium)
# tools/style_check.sh holds every file to .clang-format, changed lines to .clang-tidy and src/'s own
# includes to include-what-you-use (tools/include_check.sh).
DBLOCK_TEST_PACKAGES+=(clang-format clang-tidy iwyu)
