#!/usr/bin/env bash
# The one test command. On a fresh Debian 12 machine (as root, or with sudo) it installs what is
# missing, builds, starts throwaway database servers on loopback, runs every test under ASan+UBSan
# with DBLOCK_REQUIRE_SERVERS=1 (a missing server fails, never skips), runs the CLI's and the unit
# suites once in a build without MySQL and once without PostgreSQL, builds a
# consumer against the installed static library, builds the Debian packages and installs, checks
# and removes them, builds the container image and runs its compose stacks (tools/image_test.sh)
# while it runs the sanitized tier (every test not labelled `integration`, nor a suite's instance
# on the Galera cluster) under ThreadSanitizer, builds a consumer against the shared library, and
# stops the servers. Exits non-zero on any failure. Its budget (doc/architecture.md, "Tests"): 40 minutes on a
# clean clone with an empty compiler cache, 25 when ccache holds the objects of an earlier run.
#   DBLOCK_SANITIZERS="tsan" (default) — set to "" to skip ThreadSanitizer's tier. ASan+UBSan is not
#   optional: every test runs under it (the dev preset builds with -Werror and feeds the style check).
#   DBLOCK_TEST_JOBS — tests run at once; default twice the cores under ASan (its tests mostly wait on
#   servers and leases), one more than the cores under ThreadSanitizer (its tests use the CPU).
#
# The CPU is what the run waits for (measured: 83-91% busy through the tiers, and a tier at twice
# the parallelism takes as long), so every test runs once under ASan+UBSan instead of once plainly
# and again sanitized, the dev preset builds all but the test programs, and the image installs the
# packages the package step built instead of compiling the sources again. The builds that no step needs yet (no-mysql, no-postgres, shared, package and
# tsan) run one after another in the background at the lowest CPU priority (nice 19); a step that
# needs a build waits for it. The step table at the end lists them apart, with their own wall times.
#
# tools/test.sh --quick is the developer's loop: the same packages and dev build, the style check,
# then PostgreSQL, MariaDB and PgBouncer (no cluster) and every suite but the slow ones (nemesis,
# stress, clusters, Patroni, the Python clients, the bench smoke); nothing after that.
# tools/test.sh --loaded is the check to run after touching a test that waits for time: every test
# under ASan at twice CI's parallelism, beside one CPU burner per core.
# The full run (no argument) is what CI runs.
set -euo pipefail
mode=full
case ${1-} in
  --quick) mode=quick ;;
  --loaded) mode=loaded ;;
  "") ;;
  *) echo "usage: tools/test.sh [--quick | --loaded]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
root=$PWD
jobs=$(nproc)
test_jobs=${DBLOCK_TEST_JOBS-$((2 * jobs))}
tsan_test_jobs=${DBLOCK_TEST_JOBS-$((jobs + 1))}
sanitizers=${DBLOCK_SANITIZERS-tsan}
case $sanitizers in
  "" | tsan) ;;
  *) echo "DBLOCK_SANITIZERS may be tsan or empty (every test runs under ASan+UBSan anyway): '$sanitizers'" >&2
     exit 2 ;;
esac
budget_warning_seconds=2700  # 45 minutes: past it the step table ends with the slowest steps
# The tiers, by label (a test added later falls in one by its labels, never by a list here):
# the quick tier leaves out the slow suites and those needing the Galera cluster; the sanitized tier
# leaves out `integration`, the tests of other processes and servers, which ASan's tier runs.
slow_labels='nemesis|stress|cluster|python|bench'
slow_names='Galera|galera'
unsanitized_labels='integration'
# ThreadSanitizer's tier also leaves out a suite's instances on the Galera cluster: they run the
# client code of the `mysql_table` instance against another server, which no sanitizer sees; ASan's
# tier runs them, and the cluster's own client paths are its `integration` tests. PgBouncer's
# instances stay: behind a pooler in transaction mode the client sends its statements by another
# path (unnamed, with their text, chosen at run time) and keeps no listener.
server_only_instances='/galera_'

# Each step's wall time, printed again as a table when the script ends (passed or failed): CI
# shows the end of the log, and the table says where a slow or failed run spent its time.
step_names=() step_starts=()
step() {
  step_names+=("$*") step_starts+=("$SECONDS")
  printf '\n==> [%d s] %s\n' "$SECONDS" "$*"
}
dbdir= burners=()
print_step_times() {
  local i end lines=()
  for i in "${!step_names[@]}"; do
    end=${step_starts[i + 1]-$SECONDS}
    lines+=("$(printf '%6d  %s' $((end - step_starts[i])) "${step_names[i]:0:100}")")
  done
  printf '\n==> wall time by step (s), %d s in all\n' "$SECONDS"
  printf '%s\n' "${lines[@]}"
  if compgen -G "$background/*.seconds" > /dev/null; then
    printf '    beside them, in the background (builds at nice 19):\n'
    for i in "$background"/*.seconds; do
      [ "$(basename "$i")" = builds.seconds ] || printf '%6d  %s\n' "$(cat "$i")" "$(basename "$i" .seconds)"
    done
  fi
  if command -v ccache > /dev/null; then
    printf '    compiler cache: %s\n' "$(ccache --print-stats 2> /dev/null \
      | awk '$1 ~ /^(direct|preprocessed)_cache_hit$/ { hit += $2 } $1 == "cache_miss" { miss = $2 }
             END { printf "%d hits, %d misses this run", hit, miss }')"
  fi
  if [ "$SECONDS" -gt "$budget_warning_seconds" ]; then
    printf '\nWARNING: %d s is past the %d s warning line (the budget is 2400 s on a clean clone, CI stops at 5400 s).\n' \
      "$SECONDS" "$budget_warning_seconds"
    printf 'The slowest steps:\n'
    printf '%s\n' "${lines[@]}" | sort -rn | head -4 || true  # head may close the pipe before sort ends
  fi
}
on_exit() {
  local pid
  for pid in "${burners[@]}"; do kill "$pid" 2> /dev/null || true; done
  for pid in "${background_pids[@]}"; do kill -- "-$pid" 2> /dev/null || true; done
  print_step_times
  if [ -n "$dbdir" ]; then "$root/tools/testdb.sh" stop "$dbdir" || true; fi
}
trap on_exit EXIT

# Work that runs beside the foreground steps: each job has a name, a log, and, once it ended, a
# status and its seconds in $background (job NAME's are NAME.log, NAME.status, NAME.seconds).
# in_background NAME [nice] COMMAND... starts one; await NAME waits for it, prints its log and fails
# the script if it failed. build_in_background PRESET... builds presets one after another at nice 19,
# each its own job (build-PRESET): the whole preset, or the targets build_targets[PRESET] names.
# Each job runs in a process group of its own, so that on_exit can stop all of it.
background=$(mktemp -d /tmp/dblock-background.XXXXXX)
# What the builds without a backend run (the step "builds without ...") is all they build.
declare -A build_targets=([no-mysql]="dblock_cli unit_test cli_test" [no-postgres]="dblock_cli unit_test cli_test")
background_pids=()
in_background() {
  local name=$1; shift
  set -m
  (
    start=$SECONDS status=0
    "$@" > "$background/$name.log" 2>&1 || status=$?
    echo $((SECONDS - start)) > "$background/$name.seconds"
    echo "$status" > "$background/$name.status"
  ) &
  set +m
  background_pids+=($!)
}
build_in_background() {
  local preset specs=()
  for preset in "$@"; do
    : > "$background/build-$preset.queued"
    specs+=("$preset ${build_targets[$preset]-}")
  done
  in_background builds bash -c '
    for spec in "$@"; do
      read -r preset targets <<< "$spec"
      start=$SECONDS status=0
      { cmake --preset "$preset" && nice -n 19 cmake --build --preset "$preset" -j "'"$jobs"'" ${targets:+--target $targets}; } \
        > "'"$background"'/build-$preset.log" 2>&1 || status=$?
      echo $((SECONDS - start)) > "'"$background"'/build-$preset.seconds"
      echo "$status" > "'"$background"'/build-$preset.status"
      [ "$status" = 0 ] || exit 1
    done' build-chain "${specs[@]}"
}
# ctest starts the tests it knows to be long first when the build holds their times from an earlier
# run (Testing/Temporary/CTestCostData.txt); a clean clone has none, so its long suites started
# wherever their directory falls and ran on alone at the tier's end. tools/ctest-costs/PRESET.txt is
# such a file from a full run (regenerate: copy it back from build/PRESET after one); a test it does not
# know starts after those it knows, and a build's own data, once it has some, wins.
seed_test_costs() {
  local costs=build/$1/Testing/Temporary/CTestCostData.txt
  if [ -e "tools/ctest-costs/$1.txt" ] && [ ! -e "$costs" ]; then
    mkdir -p "$(dirname "$costs")" && cp "tools/ctest-costs/$1.txt" "$costs"
  fi
}
await() {
  # Polled: the jobs are not all this shell's direct children. Bounded: a job that died without
  # a status (the build chain stopped at an earlier preset) ends the wait.
  while [ ! -e "$background/$1.status" ]; do
    if [ -e "$background/builds.status" ] && [ "${1#build-}" != "$1" ]; then
      echo "the background builds stopped before $1 (an earlier build failed; its log is above)" >&2
      exit 1
    fi
    sleep 2
  done
  if [ "$(cat "$background/$1.status")" != 0 ]; then
    # A build's error is at its log's end; a test run's failures are all through it.
    case $1 in build-*) tail -100 "$background/$1.log" >&2 ;; *) cat "$background/$1.log" >&2 ;; esac
    echo "$1 failed (its log is above)" >&2
    exit 1
  fi
  case $1 in
    build-*) echo "($1 was done in the background in $(cat "$background/$1.seconds") s)" ;;
    *) cat "$background/$1.log"; echo "($1 ran in the background for $(cat "$background/$1.seconds") s)" ;;
  esac
}

step "checking Debian packages"
source tools/deps.sh
install_missing "${DBLOCK_BUILD_PACKAGES[@]}" "${DBLOCK_TEST_PACKAGES[@]}"
command -v ccache > /dev/null && ccache --zero-stats > /dev/null

if [ "$mode" = full ]; then
  step "docker-compose config (the compose file is valid; no engine is needed)"
  docker-compose -f docker/compose.yaml config > /dev/null
  docker-compose -f docker/compose.mariadb.yaml config > /dev/null
fi

cmake --preset dev > /dev/null
if [ "$mode" = quick ]; then
  step "configure and build (preset dev, -Werror)"
  cmake --build --preset dev -j "$jobs"
else
  # Its tests are built and run in the asan preset (below): compiling them a second time, file by
  # file without optimisation, cost about as much CPU as all the other builds of the dev preset.
  step "configure and build (preset dev, -Werror: all but the test programs)"
  cmake --build --preset dev -j "$jobs" --target dblock_without_tests
fi

if [ "$mode" = quick ]; then
  step "style: every file against .clang-format, lines changed since tools/style-baseline against .clang-tidy, src/'s includes"
  tools/style_check.sh build/dev
fi

dbdir=$(mktemp -d /tmp/dblock-test.XXXXXX)
step "starting throwaway servers in $dbdir"
eval "$("$root/tools/testdb.sh" start "$dbdir")"
export DBLOCK_REQUIRE_SERVERS=1
if [ "$mode" = quick ]; then
  step "ctest (dev, quick tier: no nemesis, stress, Galera, Patroni, Python or bench tests)"
  ctest --preset dev -j "$test_jobs" -LE "$slow_labels" -E "$slow_names"
  step "quick tier passed (the full run: tools/test.sh)"
  exit 0
fi
step "starting a three-node MariaDB Galera cluster in $dbdir"
eval "$("$root/tools/testdb.sh" start-galera "$dbdir")"

if [ "$mode" != quick ]; then  # (--quick ended above)
  # Every test runs on this build (the step below); the dev build above is the -Werror build of each
  # file on its own, the style check's compile commands and the consumer's installed library.
  step "configure and build (preset asan: ASan+UBSan, -Werror)"
  cmake --preset asan > /dev/null
  cmake --build --preset asan -j "$jobs"
fi

if [ "$mode" = loaded ]; then
  for ((i = 0; i < jobs; ++i)); do
    (while :; do :; done) &
    burners+=($!)
  done
  step "ctest (asan: every test) at $((2 * test_jobs)) at once, beside $jobs CPU burners"
  ctest --preset asan -j "$((2 * test_jobs))"
  step "the loaded run passed"
  exit 0
fi

# Beside the tests: the other presets' builds at nice 19, in the order the steps below need them.
# ThreadSanitizer's build comes right after the two small ones: its tier is the longest step, and
# it waited 420 s for that build when it came last (the full run of 2026-12-07). The packages come
# before that tier too: the container image is built from them (below) while it runs. The shared
# library's step needs nothing later, so it comes after the tier and its build last.
sanitizer_list=($sanitizers)
build_order=(no-mysql no-postgres "${sanitizer_list[@]}" package shared)
build_in_background "${build_order[@]}"
# The style check is clang-tidy's and include-what-you-use's CPU alone: at nice 19 it takes what the
# tests leave; its verdict is awaited before the run can pass.
in_background style nice -n 19 tools/style_check.sh build/dev

step "ctest (asan: every test, ASan+UBSan)"
seed_test_costs asan
ctest --preset asan -j "$test_jobs"

step "fuzz the URI, duration and name parsers (libFuzzer, 20 s)"
tools/fuzz.sh 20 "$dbdir/fuzz"

step "install the static library and build a consumer against it (find_package and pkg-config)"
prefix=$(mktemp -d /tmp/dblock-install.XXXXXX)
cmake --install build/dev --prefix "$prefix" --component dev > /dev/null
tests/consumer/check.sh "$prefix" "$DBLOCK_TEST_PG_DSN?prefix=consumer_"
rm -rf "$prefix"

step "builds without the mysql and without the postgres backend, side by side (presets no-mysql and no-postgres: the CLI's and the unit suites)"
# The question here is only whether a build without one backend still works: what differs between
# it and the ASan build above is the backend factory, the CLI's list of backends and what is linked.
# So the suites that run here are the CLI's (every subcommand on each backend that remains, and the
# backends `--version` lists) and the unit tests (the factory's); the rest is the same code,
# run above. The two runs mostly wait on servers and share none: one is on PostgreSQL, the other on
# MariaDB (SQLite's files are each test's own), so neither meets the other's advisory or GET_LOCK names.
for backend in mysql postgres; do
  await "build-no-$backend"
  if "build/no-$backend/dblock" --version | grep "^  $backend" > /dev/null; then
    echo "dblock --version lists $backend in a build without it" >&2; exit 1
  fi
  in_background "ctest-no-$backend" \
    ctest --preset "no-$backend" -j "$test_jobs" --no-tests=error -L "unit|cli" -LE "$unsanitized_labels"
done
await ctest-no-mysql
await ctest-no-postgres

step "Debian packages: package the release build with CPack, install, use, remove"
await build-package
(cd build/package && rm -f ./*.deb && cpack -G DEB > /dev/null)
tools/check_packages.sh build/package "$DBLOCK_TEST_PG_DSN?prefix=consumer_deb_"
# The image installs these very packages: its first stage configures (proving its build
# dependencies) and does not compile the same sources again.
in_background image tools/image_test.sh build/package

for preset in "${sanitizer_list[@]}"; do
  step "ctest under preset $preset (sanitized tier: every test not labelled $unsanitized_labels, nor run on $server_only_instances)"
  await "build-$preset"
  seed_test_costs "$preset"
  ctest --preset "$preset" -j "$tsan_test_jobs" -LE "$unsanitized_labels" -E "$server_only_instances"
done

step "libdblock.so (preset shared) and a consumer against it; its SONAME and exports"
await build-shared
prefix=$(mktemp -d /tmp/dblock-install.XXXXXX)
cmake --install build/shared --prefix "$prefix" --component dev > /dev/null
tests/consumer/check.sh "$prefix" "$DBLOCK_TEST_MYSQL_DSN?prefix=consumer_"
rm -rf "$prefix"
ldd build/shared/dblock | grep "libdblock.so.[0-9]* => $root/build/shared/" > /dev/null \
  || { echo "the shared build's CLI does not load its libdblock.so" >&2; exit 1; }
build/shared/dblock --dsn "sqlite://$dbdir/shared.db" run --name shared-cli -- true

step "the container image: built and its compose stacks run on PostgreSQL and MariaDB (own dockerd; in the background)"
await image

step "style: every file against .clang-format, lines changed since tools/style-baseline against .clang-tidy, src/'s includes (in the background)"
await style

step "all tests passed"
