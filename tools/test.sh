#!/usr/bin/env bash
# The one test command. On a fresh Debian 12 machine (as root, or with sudo) it installs what is
# missing, builds, starts throwaway database servers on loopback, runs every test with
# DBLOCK_REQUIRE_SERVERS=1 (a missing server fails, never skips), builds and runs the quick tier
# once without MySQL and once without PostgreSQL, builds a consumer against the installed static and shared
# library, builds the Debian packages and installs, checks and removes them, builds the container
# image and runs its compose stacks (tools/image_test.sh), repeats the suites
# under ThreadSanitizer and ASan+UBSan, and stops the servers. Exits non-zero on any failure.
#   DBLOCK_SANITIZERS="tsan asan" (default) — set to "" to skip the sanitizer builds.
#   DBLOCK_TEST_JOBS — tests run at once; default twice the cores (the database tests mostly wait on
#   servers and leases: at one per core the CPU is busy under half the time), under the sanitizers
#   one more than the cores (their tests use the CPU far more).
#
# tools/test.sh --quick is the developer's loop: the same packages and dev build, the style check,
# then PostgreSQL, MariaDB and PgBouncer (no cluster) and every suite but the slow ones (nemesis,
# stress, clusters, Patroni, the Python clients, the bench smoke); nothing after that. The full run
# (no argument) is what CI runs.
set -euo pipefail
quick=0
case ${1-} in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: tools/test.sh [--quick]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
root=$PWD
jobs=$(nproc)
test_jobs=${DBLOCK_TEST_JOBS-$((2 * jobs))}
sanitizer_test_jobs=${DBLOCK_TEST_JOBS-$((jobs + 1))}
sanitizers=${DBLOCK_SANITIZERS-tsan asan}
# Each step's wall time, printed again as a table when the script ends (passed or failed): CI
# shows the end of the log, and the table says where a slow or failed run spent its time.
step_names=() step_starts=()
step() {
  step_names+=("$*") step_starts+=("$SECONDS")
  printf '\n==> [%d s] %s\n' "$SECONDS" "$*"
}
print_step_times() {
  local i end
  printf '\n==> wall time by step (s), %d s in all\n' "$SECONDS"
  for i in "${!step_names[@]}"; do
    end=${step_starts[i + 1]-$SECONDS}
    printf '%6d  %s\n' $((end - step_starts[i])) "${step_names[i]:0:100}"
  done
}
dbdir=
on_exit() {
  print_step_times
  if [ -n "$dbdir" ]; then "$root/tools/testdb.sh" stop "$dbdir" || true; fi
}
trap on_exit EXIT
slow_labels='nemesis|stress|cluster|python|bench'
slow_names='Patroni|patroni|Galera|galera'

step "checking Debian packages"
source tools/deps.sh
install_missing "${DBLOCK_BUILD_PACKAGES[@]}" "${DBLOCK_TEST_PACKAGES[@]}"

step "docker-compose config (the compose file is valid; no engine is needed)"
docker-compose -f docker/compose.yaml config > /dev/null
docker-compose -f docker/compose.mariadb.yaml config > /dev/null

step "configure and build (preset dev, -Werror)"
cmake --preset dev > /dev/null
cmake --build --preset dev -j "$jobs"

step "style: lines changed since tools/style-baseline against .clang-format and .clang-tidy"
tools/style_check.sh build/dev

dbdir=$(mktemp -d /tmp/dblock-test.XXXXXX)
step "starting throwaway servers in $dbdir"
eval "$("$root/tools/testdb.sh" start "$dbdir")"
export DBLOCK_REQUIRE_SERVERS=1
if [ "$quick" = 1 ]; then
  step "ctest (dev, quick tier: no nemesis, stress, Galera, Patroni, Python or bench tests)"
  ctest --preset dev -j "$test_jobs" -LE "$slow_labels" -E "$slow_names"
  step "quick tier passed (the full run: tools/test.sh)"
  exit 0
fi
step "starting a three-node MariaDB Galera cluster in $dbdir"
eval "$("$root/tools/testdb.sh" start-galera "$dbdir")"

step "ctest (dev)"
ctest --preset dev -j "$test_jobs"

for backend in mysql postgres; do
  step "build and ctest without the $backend backend (preset no-$backend: library, CLI and the quick tier's suites that apply)"
  cmake --preset "no-$backend" > /dev/null
  cmake --build --preset "no-$backend" -j "$jobs"
  if "build/no-$backend/dblock" --version | grep -q "^  $backend"; then
    echo "dblock --version lists $backend in a build without it" >&2; exit 1
  fi
  # The slow suites (nemesis, stress, clusters, Python, bench) ran on every backend in the dev
  # preset above; here the question is only whether a build without one backend still works.
  ctest --preset "no-$backend" -j "$test_jobs" -LE "$slow_labels" -E "$slow_names"
done

step "fuzz the URI, duration and name parsers (libFuzzer, 20 s)"
tools/fuzz.sh 20 "$dbdir/fuzz"

step "install the static library and build a consumer against it (find_package and pkg-config)"
prefix=$(mktemp -d /tmp/dblock-install.XXXXXX)
cmake --install build/dev --prefix "$prefix" --component dev > /dev/null
tests/consumer/check.sh "$prefix" "$DBLOCK_TEST_PG_DSN?prefix=consumer_"
rm -rf "$prefix"

step "build libdblock.so (preset shared) and a consumer against it; its SONAME and exports"
cmake --preset shared > /dev/null
cmake --build --preset shared -j "$jobs"
prefix=$(mktemp -d /tmp/dblock-install.XXXXXX)
cmake --install build/shared --prefix "$prefix" --component dev > /dev/null
tests/consumer/check.sh "$prefix" "$DBLOCK_TEST_MYSQL_DSN?prefix=consumer_"
rm -rf "$prefix"
ldd build/shared/dblock | grep -q "libdblock.so.[0-9]* => $root/build/shared/" \
  || { echo "the shared build's CLI does not load its libdblock.so" >&2; exit 1; }
build/shared/dblock --dsn "sqlite://$dbdir/shared.db" run --name shared-cli -- true

step "Debian packages: build with CPack, install, use, remove"
cmake --preset package > /dev/null
cmake --build --preset package -j "$jobs"
(cd build/package && rm -f ./*.deb && cpack -G DEB > /dev/null)
tools/check_packages.sh build/package "$DBLOCK_TEST_PG_DSN?prefix=consumer_deb_"

step "the container image: build it, run the compose stacks on PostgreSQL and MariaDB (own dockerd)"
tools/image_test.sh

for preset in $sanitizers; do
  step "build and ctest under preset $preset"
  cmake --preset "$preset" > /dev/null
  cmake --build --preset "$preset" -j "$jobs"
  ctest --preset "$preset" -j "$sanitizer_test_jobs"
done

step "all tests passed"
