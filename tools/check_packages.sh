#!/usr/bin/env bash
# usage: tools/check_packages.sh DIR DSN
# Installs the dblock and libdblock-dev packages in DIR with apt-get, as a user would (apt resolves
# their dependencies), checks what they put on the machine, and removes them again, also when a
# check fails: the packages' dependencies, `dblock --version`, a lock taken by the installed CLI,
# every manual page against the CLI's help (read with `man`), the systemd units with
# `systemd-analyze verify`, the bash completion, and a consumer built through find_package and
# through pkg-config against /usr. Refuses to run where dblock is already installed.
set -euo pipefail
dir=$(realpath "$1") dsn=$2
root=$(cd "$(dirname "$0")/.." && pwd)
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
fail() { echo "package check: $*" >&2; exit 1; }
shopt -s nullglob
cli_debs=("$dir"/dblock_*.deb) dev_debs=("$dir"/libdblock-dev_*.deb)
[ ${#cli_debs[@]} -eq 1 ] && [ ${#dev_debs[@]} -eq 1 ] || fail "expected one dblock and one libdblock-dev package in $dir"
cli_deb=${cli_debs[0]} dev_deb=${dev_debs[0]}
for package in dblock libdblock-dev; do
  if dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep 'ok installed' > /dev/null; then
    fail "$package is installed on this machine already; this check would remove it (apt-get remove $package first)"
  fi
done

echo "-- what the packages declare"
dpkg-deb -f "$cli_deb" Package Version Depends
dpkg-deb -f "$dev_deb" Package Version Depends
for dependency in libpq5 libmysqlcppconn7v5 libsoci-sqlite3-4.0 libspdlog1.10; do
  dpkg-deb -f "$cli_deb" Depends | grep "\b$dependency\b" > /dev/null || fail "dblock does not depend on $dependency"
done
for dependency in libspdlog-dev libfmt-dev libpq-dev libmysqlcppconn-dev libsoci-dev libsqlite3-dev; do
  dpkg-deb -f "$dev_deb" Depends | grep "\b$dependency\b" > /dev/null || fail "libdblock-dev does not depend on $dependency"
done

remove() { DEBIAN_FRONTEND=noninteractive $sudo apt-get remove --purge -y -qq dblock libdblock-dev > /dev/null || true; }
trap remove EXIT
echo "-- apt-get install $(basename "$cli_deb") $(basename "$dev_deb")"
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$cli_deb" "$dev_deb" > /dev/null
[ "$(command -v dblock)" = /usr/bin/dblock ] || fail "dblock is not /usr/bin/dblock on PATH"
dblock --version
dblock --version | grep "^dblock $(dpkg-deb -f "$cli_deb" Version | sed 's/-[^-]*$//') " > /dev/null \
  || fail "dblock --version does not name the package's version"
work=$(mktemp -d /tmp/dblock-packages.XXXXXX)
trap 'remove; rm -rf "$work"' EXIT
DBLOCK_STATE_DIR=$work dblock run --name installed -- sh -c 'test "$DBLOCK_FENCING_TOKEN" -ge 1'

echo "-- manual pages, read with man"
"$root/tools/man/check_man_pages.sh" /usr/bin/dblock

echo "-- bash completion"
"$root/tests/cli/completion_test.sh" /usr/bin/dblock /usr/share/bash-completion/completions/dblock

echo "-- systemd units"
units=/usr/lib/systemd/system
for unit in dblock-reaper.service dblock-run@.service dblock-run@.timer; do
  [ -f "$units/$unit" ] || fail "no $units/$unit"
done
# A template is verified as an instance of it.
ln -s "$units/dblock-reaper.service" "$work/dblock-reaper.service"
ln -s "$units/dblock-run@.service" "$work/dblock-run@nightly-report.service"
ln -s "$units/dblock-run@.timer" "$work/dblock-run@nightly-report.timer"
(cd "$work" && systemd-analyze verify ./dblock-reaper.service ./dblock-run@nightly-report.service \
                                      ./dblock-run@nightly-report.timer)
exposure=$(cd "$work" && systemd-analyze security --offline=true ./dblock-reaper.service 2>&1 \
             | sed -n 's/.*Overall exposure level for dblock-reaper.service: \([0-9.]*\).*/\1/p')
echo "dblock-reaper.service: exposure level $exposure (systemd-analyze security; 0 safest, 10 unprotected)"
awk -v level="$exposure" 'BEGIN { exit !(level != "" && level < 2.5) }' || fail "the reaper's unit exposure is ${exposure:-unknown}, over 2.5"

echo "-- a consumer of libdblock-dev"
"$root/tests/consumer/check.sh" /usr "$dsn"

remove
trap 'rm -rf "$work"' EXIT
[ ! -e /usr/bin/dblock ] && [ ! -e /usr/include/dblock ] || fail "apt-get remove left dblock's files behind"
echo "packages installed, checked and removed"
