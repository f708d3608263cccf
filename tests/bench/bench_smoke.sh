#!/usr/bin/env bash
# The bench smoke: `dblock bench` runs every scenario briefly on each backend this build holds and
# prints sane figures (no zero or invalid rate, every scenario present). No timing thresholds: speed
# is judged by reading bench's own ratios (doc/performance.md), never by a test.
#   bench_smoke.sh DBLOCK_CLI BACKEND...   (BACKEND: postgres, mysql, sqlite)
# The servers come from DBLOCK_TEST_PG_DSN / DBLOCK_TEST_MYSQL_DSN; without one the backend is
# skipped (exit 77), unless DBLOCK_REQUIRE_SERVERS=1, when it fails.
set -euo pipefail
cli=$1; shift
work=$(mktemp -d /tmp/dblock-bench-smoke.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "bench smoke: $*" >&2; exit 1; }
skipped=0
need() {  # need VAR BACKEND: sets dsn, or skips (fails when servers are required)
  dsn=${!1-}
  if [ -z "$dsn" ]; then
    [ "${DBLOCK_REQUIRE_SERVERS-}" = 1 ] && fail "$1 is not set and DBLOCK_REQUIRE_SERVERS=1 ($2)"
    echo "bench smoke: $1 not set, $2 skipped" >&2; skipped=1; return 1
  fi
}
sane_rates() {
  if grep -Eq '"ops_per_sec":(0\.0|-|nan|inf)' <<< "$1"; then fail "$2 printed a zero or invalid rate: $1"; fi
}
common=(--duration 200ms --threads 2 --renew-locks 50 --rows 500 --batch 100)

for backend in "$@"; do
  case $backend in
    postgres)
      need DBLOCK_TEST_PG_DSN postgres || continue
      dsn="$dsn?prefix=bench_smoke_"
      "$cli" --dsn "$dsn" migrate up > /dev/null
      json=$("$cli" --dsn "$dsn" bench --json "${common[@]}")
      for scenario in uncontended handoff renew reap; do
        grep -q "\"scenario\":\"$scenario\"" <<< "$json" || fail "PostgreSQL printed no $scenario figure: $json"
      done
      sane_rates "$json" PostgreSQL
      grep -Eq '"scenario":"uncontended".*"ceiling_ops_per_sec":"[1-9][0-9]*".*"ratio_to_ceiling":"[0-9]' <<< "$json" \
        || fail "PostgreSQL printed no ceiling beside the uncontended figure: $json"
      for scenario in work names; do
        "$cli" --dsn "$dsn" bench --json --scenario $scenario --threads 2 --duration 200ms | grep -E \
          "\"scenario\":\"$scenario\".*\"ops_per_sec\":[1-9][0-9.]*,.*\"floor_ops_per_sec\":[1-9].*\"ratio\":[0-9]" \
          > /dev/null || fail "PostgreSQL printed no $scenario figure beside the hand-written SQL"
      done
      "$cli" --dsn "$dsn" bench --json --scenario fence --duration 200ms | grep -E \
        '"scenario":"fence".*"ops_per_sec":[1-9][0-9.]*,.*"floor_ops_per_sec":[1-9].*"ratio":[0-9]' \
        > /dev/null || fail "PostgreSQL printed no fence figure"
      json=$("$cli" --dsn "$dsn" bench --json --mode advisory --duration 200ms --threads 2)
      grep -q '"mode":"advisory"' <<< "$json" || fail "PostgreSQL printed no advisory figure: $json"
      sane_rates "$json" "PostgreSQL advisory" ;;
    mysql)
      need DBLOCK_TEST_MYSQL_DSN mysql || continue
      dsn="$dsn?prefix=bench_smoke_"
      "$cli" --dsn "$dsn" migrate up > /dev/null
      for mode in table advisory; do
        json=$("$cli" --dsn "$dsn" bench --json --mode "$mode" "${common[@]}")
        grep -q '"scenario":"uncontended"' <<< "$json" || fail "MySQL ($mode) printed no figure: $json"
        sane_rates "$json" "MySQL $mode"
      done ;;
    sqlite)
      json=$("$cli" --dsn "sqlite://$work/bench.db" bench --json "${common[@]}")
      grep -q '"scenario":"uncontended"' <<< "$json" || fail "SQLite printed no figure: $json"
      sane_rates "$json" SQLite ;;
    *) fail "unknown backend '$backend'" ;;
  esac
done
[ "$skipped" = 0 ] || exit 77
echo "bench smoke: figures printed for $*"
