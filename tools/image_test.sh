#!/usr/bin/env bash
# usage: tools/image_test.sh [DEB_DIR]  (as root; called by tools/test.sh)
# DEB_DIR: the dblock and libdblock-dev packages built from this checkout (tools/test.sh gives
# build/package): handed to the image's first stage in docker/prebuilt/, which then configures (so
# every build dependency it installs is still found) and takes them instead of compiling the same
# sources a second time. Without it the stage compiles, as a user's `docker build` does.
# Builds the container image and runs the compose stacks for real, on a Debian 12 machine that
# reaches Debian's archive and no image registry (nothing is pulled):
#  - its own dockerd (Debian's docker.io) on a private socket, data root and exec root in a
#    temporary directory; a system docker, if one runs, is not used or touched;
#  - debian:bookworm-slim (also tagged debian:bookworm) made by mmdebstrap from the apt sources this
#    machine uses, cached in DBLOCK_IMAGE_CACHE (/var/cache/dblock-image) for the day;
#  - dblock:local from docker/Dockerfile: `--version`, the non-root user, the embedded store, the
#    health check; stand-ins for postgres:15-bookworm and mariadb:10.11 from docker/standins/;
#  - docker/compose.yaml (PostgreSQL) and docker/compose.mariadb.yaml (MariaDB) with docker-compose:
#    the migration job exits 0, the two worker replicas' runs (their own start/end lines) do not
#    overlap and their fencing tokens rise, the reaper turns healthy and serves /healthz and
#    /metrics on a port published on 127.0.0.1 only, stops cleanly on SIGTERM, and `down` leaves
#    no container or network of the project.
# Everything it started goes on success and on failure: containers, networks, images (with the data
# root), dockerd and its containerd, the bridges and veth links, and the iptables rules and chains
# dockerd added; IP forwarding and the FORWARD policy are restored. Then it checks that `ip link`
# and `iptables-save` are as they were, and fails if not.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fail() { echo "image test: $*" >&2; exit 1; }
say() { printf -- '-- %s (%ds)\n' "$*" "$SECONDS"; }
[ "$(id -u)" = 0 ] || fail "needs root (it runs its own dockerd)"
for tool in dockerd mmdebstrap docker-compose curl iptables iptables-save ip python3; do
  command -v "$tool" > /dev/null || fail "no $tool (tools/deps.sh installs it)"
done
# Debian's client, whatever else is first on PATH; docker-compose talks to DOCKER_HOST itself.
docker=/usr/bin/docker
[ -x "$docker" ] || fail "no $docker (Debian's docker.io)"
iptables -t filter -S > /dev/null && iptables -t nat -S > /dev/null \
  || fail "iptables cannot be used here; dockerd needs it for the compose networks"


# What the host has before dockerd: restored and compared afterwards.
link_names() { ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | sort; }
# Without counters, comments and the empty built-in tables and chains that dockerd's first use of
# iptables-nft creates (they change nothing: ACCEPT is the policy of a missing chain too), and
# without the rules of the cut tests, which may run meanwhile (tools/test.sh runs this beside the
# suites) and remove their own (comment dblock-cut-test-*).
rules() {
  { iptables-save 2> /dev/null || true; } \
    | sed -e '/^#/d' -e '/^\*/d' -e '/^COMMIT$/d' -e 's/ *\[[0-9]*:[0-9]*\]//' -e '/dblock-cut-test/d' \
    | grep -Ev '^:(PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) ACCEPT$' || true
}
links_before=$(link_names)
rules_before=$(rules)
declare -A specs_before
for table in filter nat; do specs_before[$table]=$(iptables -t "$table" -S); done
forward_before=$(cat /proc/sys/net/ipv4/ip_forward)
forward_policy_before=$(iptables -t filter -S FORWARD | awk '$1 == "-P" { print $3 }')
dockerd_pid=""
prebuilt=""
if [ -n "${1-}" ]; then
  compgen -G "$1/dblock_*.deb" > /dev/null && compgen -G "$1/libdblock-dev_*.deb" > /dev/null \
    || fail "no dblock_*.deb and libdblock-dev_*.deb in $1"
  [ ! -e docker/prebuilt ] || fail "docker/prebuilt exists (another image test running, or one left it)"
  prebuilt=$root/docker/prebuilt
  mkdir "$prebuilt"
  cp "$1"/dblock_*.deb "$1"/libdblock-dev_*.deb "$prebuilt/"
fi
work=$(mktemp -d /tmp/dblock-image.XXXXXX)
export DOCKER_HOST=unix://$work/docker.sock DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0
unset DOCKER_CONTEXT DOCKER_CONFIG DOCKER_TLS_VERIFY DOCKER_CERT_PATH

undo_network() {
  local name table line chain rule
  while read -r name; do
    case $name in docker0 | br-* | veth*) ip link delete "$name" 2> /dev/null || true ;; esac
  done < <(comm -13 <(echo "$links_before") <(link_names))
  for table in filter nat; do
    # Rules dockerd added to the built-in chains (jumps to its chains, masquerading), then its chains.
    while read -r line; do
      chain=$(awk '{ print $2 }' <<< "$line")
      case $chain in PREROUTING | INPUT | FORWARD | OUTPUT | POSTROUTING) ;; *) continue ;; esac
      read -ra rule <<< "${line#-A }"
      iptables -t "$table" -D "${rule[@]}" 2> /dev/null || true
    done < <(comm -13 <(sort <<< "${specs_before[$table]}") <(iptables -t "$table" -S | grep '^-A' | grep -v dblock-cut-test | sort))
    local added
    added=$(comm -13 <(sort <<< "${specs_before[$table]}") <(iptables -t "$table" -S | grep '^-N' | sort) | awk '{ print $2 }')
    for chain in $added; do iptables -t "$table" -F "$chain" 2> /dev/null || true; done
    for chain in $added; do iptables -t "$table" -X "$chain" 2> /dev/null || true; done
  done
  [ -z "$forward_policy_before" ] || iptables -t filter -P FORWARD "$forward_policy_before"
  echo "$forward_before" > /proc/sys/net/ipv4/ip_forward
}

cleanup() {
  local status=$? pid
  set +e
  say "clean-up: containers, networks, dockerd, its data root, links and iptables rules"
  trap - EXIT INT TERM
  if [ -n "$dockerd_pid" ] && kill -0 "$dockerd_pid" 2> /dev/null; then
    # What a failure left of the stacks; the images and volumes go with the data root.
    local containers
    containers=$("$docker" ps -aq)
    [ -z "$containers" ] || "$docker" rm -f $containers > /dev/null
    "$docker" network prune -f > /dev/null
    kill -TERM "$dockerd_pid"
    for _ in $(seq 1 300); do kill -0 "$dockerd_pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$dockerd_pid" 2> /dev/null
    wait "$dockerd_pid" 2> /dev/null
  fi
  # dockerd's own containerd, by its pid file, in case dockerd did not stop it.
  pid=$(cat "$work/exec/containerd/containerd.pid" 2> /dev/null)
  [ -z "$pid" ] || ! kill -0 "$pid" 2> /dev/null || { kill -TERM "$pid"; sleep 1; kill -KILL "$pid" 2> /dev/null; }
  findmnt -rn -o TARGET | grep "^$work/" | sort -r | while read -r mount; do umount -l "$mount"; done
  rm -rf --one-file-system "$work"
  [ -z "$prebuilt" ] || rm -rf "$prebuilt"
  undo_network
  local leftover=""
  [ "$(link_names)" = "$links_before" ] || leftover+=" links: $(comm -13 <(echo "$links_before") <(link_names) | tr '\n' ' ')"
  [ "$(rules)" = "$rules_before" ] || leftover+=" iptables: $(diff <(echo "$rules_before") <(rules) | grep '^[<>]' | tr '\n' ' ')"
  [ "$(cat /proc/sys/net/ipv4/ip_forward)" = "$forward_before" ] || leftover+=" ip_forward changed"
  if [ -n "$leftover" ]; then
    echo "image test: the clean-up left something behind:$leftover" >&2
    status=1
  fi
  say "clean-up done"
  [ "$status" = 0 ] || echo "image test: FAILED (exit $status); dockerd's log was in $work/dockerd.log" >&2
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "dockerd on $DOCKER_HOST"
dockerd --host "$DOCKER_HOST" --data-root "$work/data" --exec-root "$work/exec" --pidfile "$work/dockerd.pid" \
  --ip 127.0.0.1 > "$work/dockerd.log" 2>&1 &
dockerd_pid=$!
for _ in $(seq 1 300); do
  "$docker" version > /dev/null 2>&1 && break
  kill -0 "$dockerd_pid" 2> /dev/null || { tail -20 "$work/dockerd.log" >&2; fail "dockerd exited"; }
  sleep 0.1
done
"$docker" version --format 'docker {{.Server.Version}}' || { tail -20 "$work/dockerd.log" >&2; fail "dockerd does not answer"; }

# The base image, from the sources (mirror, snapshot, suites) this machine's apt uses.
sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || sources=/etc/apt/sources.list
cache=${DBLOCK_IMAGE_CACHE:-/var/cache/dblock-image}
mkdir -p "$cache"
tarball=$cache/bookworm-minbase-$(date +%Y%m%d)-$(md5sum < "$sources" | cut -c1-8).tar
if [ ! -s "$tarball" ]; then
  say "mmdebstrap: a minimal Debian 12 from $sources (cached as $tarball)"
  find "$cache" -maxdepth 1 -name 'bookworm-minbase-*.tar' -delete
  # Like the official slim image: no manual pages, documentation (but copyrights) or translations.
  mmdebstrap --quiet --variant=minbase --format=tar --aptopt='Acquire::Languages "none"' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm "$tarball.partial" "$sources"
  mv "$tarball.partial" "$tarball"
fi
say "docker import $tarball as debian:bookworm-slim and debian:bookworm"
"$docker" import --change 'CMD ["bash"]' "$tarball" debian:bookworm-slim > /dev/null
"$docker" tag debian:bookworm-slim debian:bookworm

# Builds use the host's network: apt in them reaches the archive as the host's apt does.
say "docker build -f docker/Dockerfile -t dblock:local .${prebuilt:+ (the packages of $1 handed in)}"
"$docker" build --network host -q -f docker/Dockerfile -t dblock:local . > "$work/build.log" 2>&1 \
  || { tail -40 "$work/build.log" >&2; fail "docker/Dockerfile does not build"; }
say "stand-ins: postgres:15-bookworm and mariadb:10.11 from docker/standins/"
"$docker" build --network host -q -t postgres:15-bookworm docker/standins/postgres > "$work/build.log" 2>&1 \
  || { tail -40 "$work/build.log" >&2; fail "the postgres stand-in does not build"; }
"$docker" build --network host -q -t mariadb:10.11 docker/standins/mariadb > "$work/build.log" 2>&1 \
  || { tail -40 "$work/build.log" >&2; fail "the mariadb stand-in does not build"; }
"$docker" images --format '{{.Repository}}:{{.Tag}} {{.Size}}'

say "the image: --version, its user, the embedded store, the health check"
version=$(sed -n 's/^project(dblock VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
"$docker" run --rm --network none dblock:local --version | tee "$work/version"
grep -q "^dblock $version\b" "$work/version" || fail "docker run dblock:local --version does not print 'dblock $version'"
[ "$("$docker" run --rm --network none --entrypoint id dblock:local -u)" = 10001 ] || fail "the image does not run as uid 10001"
"$docker" run --rm --network none dblock:local run --name image-smoke -- sh -c 'test "$DBLOCK_FENCING_TOKEN" -ge 1' \
  || fail "dblock run on the image's embedded store (as its user dblock) failed"
[ "$("$docker" image inspect -f '{{join .Config.Healthcheck.Test " "}}' dblock:local)" = "CMD /usr/local/bin/dblock-healthcheck" ] \
  || fail "the image has no HEALTHCHECK running dblock-healthcheck"
# The health check against a reaper on the embedded store, and against nothing listening.
reaper=$("$docker" run -d --network none dblock:local reaper --interval 1s)
for _ in $(seq 1 100); do "$docker" exec "$reaper" dblock-healthcheck 2> /dev/null && break; sleep 0.1; done
"$docker" exec "$reaper" dblock-healthcheck || fail "dblock-healthcheck fails against a running reaper"
"$docker" exec -e DBLOCK_HEALTH_PORT=9 "$reaper" dblock-healthcheck 2> /dev/null && fail "dblock-healthcheck passes with nothing listening"
"$docker" rm -f "$reaper" > /dev/null

check_stack() {
  local file=$1 project=$2 database=$3
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export DBLOCK_METRICS_PORT=$port
  compose() { docker-compose --ansi never -p "$project" -f "$file" "$@"; }
  say "$file: docker-compose up (the $database stand-in, metrics on 127.0.0.1:$port)"
  compose up -d --no-build 2>&1 | grep -v '^$' || true
  cid() { compose ps -q "$1"; }
  [ -n "$(cid migrate)" ] || { compose logs --no-color >&2; fail "$file: no migrate container"; }
  [ "$("$docker" inspect -f '{{.State.Status}} {{.State.ExitCode}}' "$(cid migrate)")" = "exited 0" ] \
    || { compose logs --no-color migrate "$database" >&2; fail "$file: migrate up did not exit 0"; }
  local reaper
  reaper=$(cid reaper)
  [ -n "$reaper" ] || { compose logs --no-color >&2; fail "$file: the reaper did not start"; }
  local health=""
  for _ in $(seq 1 600); do
    health=$("$docker" inspect -f '{{.State.Health.Status}}' "$reaper")
    [ "$health" = starting ] || break
    sleep 0.1
  done
  [ "$health" = healthy ] || { compose logs --no-color reaper >&2; fail "$file: the reaper is $health, not healthy"; }
  [ "$("$docker" port "$reaper" 9464/tcp)" = "127.0.0.1:$port" ] || fail "$file: /metrics is not published on 127.0.0.1:$port alone"
  curl -fsS --max-time 5 "http://127.0.0.1:$port/healthz"
  curl -fsS --max-time 5 "http://127.0.0.1:$port/metrics" > "$work/metrics"
  grep -q '^dblock_reaper_cycles_total [1-9]' "$work/metrics" || fail "$file: /metrics counts no reaper cycle"
  grep -q '^dblock_database_up 1$' "$work/metrics" || fail "$file: /metrics says the database is not up"

  # The two worker replicas: both exit 0, their runs do not overlap, the second's token is higher.
  local workers states=""
  workers=$(cid worker)
  [ "$(wc -w <<< "$workers")" = 2 ] || fail "$file: expected 2 worker replicas, got: $workers"
  for _ in $(seq 1 900); do
    states=$("$docker" inspect -f '{{.State.Status}} {{.State.ExitCode}}' $workers | sort -u)
    [ "$states" = "exited 0" ] && break
    grep -q running <<< "$states" || break
    sleep 0.1
  done
  [ "$states" = "exited 0" ] || { compose logs --no-color worker >&2; fail "$file: the workers did not both exit 0 ($states)"; }
  local w
  for w in $workers; do "$docker" logs "$w" 2>&1 | grep '^report ' || true; done | tee "$work/runs"
  awk '
    $2 == "start" { start[$5] = $3; n++ }
    $2 == "end"   { end[$5] = $3 }
    END {
      if (n != 2) { print "expected 2 runs, got " n; exit 1 }
      for (t in start) { if (!(t in end)) { print "run with token " t " has no end"; exit 1 } tokens[++k] = t }
      a = tokens[1]; b = tokens[2]
      if (start[b] < start[a]) { c = a; a = b; b = c }
      if (start[b] < end[a]) { print "the runs overlap: token " a " until " end[a] ", token " b " from " start[b]; exit 1 }
      if (b + 0 <= a + 0) { print "the later run has token " b ", not above " a; exit 1 }
      printf "runs one after the other: token %s then %s, %.2f s apart\n", a, b, start[b] - end[a]
    }' "$work/runs" || fail "$file: the worker replicas were not mutually exclusive"

  say "$file: SIGTERM to the reaper, then docker-compose down"
  compose stop reaper 2>&1 | grep -v '^$' || true
  [ "$("$docker" inspect -f '{{.State.ExitCode}}' "$reaper")" = 0 ] || { "$docker" logs "$reaper" >&2; fail "$file: the reaper did not exit 0 on SIGTERM"; }
  "$docker" logs "$reaper" 2>&1 | grep '"stopping"' > /dev/null || fail "$file: the reaper did not log that it is stopping"
  compose down --volumes --remove-orphans 2>&1 | grep -v '^$' || true
  [ -z "$("$docker" ps -aq --filter "label=com.docker.compose.project=$project")" ] || fail "$file: down left containers"
  [ -z "$("$docker" network ls -q --filter "label=com.docker.compose.project=$project")" ] || fail "$file: down left networks"
}
check_stack docker/compose.yaml dblock-image-test-pg postgres
check_stack docker/compose.mariadb.yaml dblock-image-test-mariadb mariadb

# A Kubernetes manifest kept in docker/ must at least be well-formed.
shopt -s nullglob
for manifest in docker/k8s*.yaml docker/kubernetes*.yaml; do
  python3 - "$manifest" <<'PY' || fail "$manifest is not a valid Kubernetes manifest"
import sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc is None: continue
    missing = [k for k in ("apiVersion", "kind", "metadata") if k not in doc]
    if missing: sys.exit(f"{sys.argv[1]}: a document without {', '.join(missing)}")
PY
done
say "image test passed"
