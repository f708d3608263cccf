#!/usr/bin/env bash
# usage: tests/consumer/check.sh PREFIX DSN
# Builds the consumer against the dblock installed under PREFIX (/usr for the Debian packages) twice,
# once through find_package(dblock) and once through pkg-config with a plain compiler command line,
# and runs both against DSN. Where the installed library is shared it also checks its SONAME, that
# the consumers load it, and that it exports dblock's public names and none of its internals.
set -euo pipefail
prefix=$(realpath "$1") dsn=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/dblock-consumer.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "consumer check: $*" >&2; exit 1; }

echo "-- find_package(dblock) under $prefix"
cmake -S "$here" -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" > /dev/null
cmake --build "$work/cmake" > /dev/null
"$work/cmake/consumer" "$dsn"

echo "-- pkg-config dblock under $prefix"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/$(gcc -print-multiarch)/pkgconfig"
pkg-config --exists --print-errors dblock
libdir=$(realpath "$(pkg-config --variable=libdir dblock)")
case $libdir in "$prefix"/lib | "$prefix"/lib/*) ;; *) fail "dblock.pc's libdir $libdir is not under $prefix" ;; esac
# shellcheck disable=SC2046  # pkg-config's words are meant to be split
g++ -std=c++20 -Wall -Wextra -Werror -Wno-missing-field-initializers -o "$work/consumer-pc" "$here/main.cpp" \
    $(pkg-config --cflags dblock) $(pkg-config --libs dblock) -Wl,-rpath,"$libdir"
"$work/consumer-pc" "$dsn"

shared=$(find "$libdir" -maxdepth 1 -name 'libdblock.so.*' -type f | head -n 1)
if [ -n "$shared" ]; then
  echo "-- shared library $shared"
  soname=$(objdump -p "$shared" | awk '$1 == "SONAME" { print $2 }')
  [[ $soname =~ ^libdblock\.so\.[0-9]+$ ]] || fail "SONAME is '$soname', not libdblock.so.<ABI version>"
  [ -e "$libdir/$soname" ] || fail "no $soname link next to $shared"
  for binary in "$work/cmake/consumer" "$work/consumer-pc"; do
    loaded=$(ldd "$binary" | awk -v so="$soname" '$1 == so { print $3 }')
    [ -n "$loaded" ] && [ "$(realpath "$loaded")" = "$(realpath "$shared")" ] || fail "$binary does not load $shared"
  done
  symbols=$(nm -D --defined-only -C "$shared")
  for wanted in 'dblock::Store::open' 'dblock::LockManager::acquire' 'typeinfo for dblock::Timeout' 'dblock::migrate('; do
    grep -qF "$wanted" <<< "$symbols" || fail "$shared does not export $wanted"
  done
  # Internals stay hidden; the exceptions are the bench's floor, which the CLI reaches, and the two
  # seams the test kit (libdblock_testing, another library) reaches: StoreParts (a store opened on a
  # test clock) and ManualClock (with the shared_ptr of its waiters, instantiated inside). Only the
  # part before the parameter list counts: an exported member of a public class may take an internal
  # type (Lock's constructor, AsyncLockManager's start_* called from its header's templates).
  # asio's headers force default visibility (#pragma GCC visibility push(default)), so the templates
  # it instantiates on dblock's types inside the library are weak exports (W) of asio's own names
  # whatever -fvisibility says; no program can instantiate them on those types, so they clash with
  # nothing, and they are left out here.
  leaked=$(grep -vE '^[0-9a-f]+ W .* asio::' <<< "$symbols" | sed 's/(.*//' \
             | grep -E 'dblock::detail::|dblock::(Pg|My|Sqlite)' | grep -vE 'dblock::detail::(BenchFloor|StoreParts|ManualClock)::' || true)
  [ -z "$leaked" ] || fail "$shared exports internals:"$'\n'"$leaked"
  echo "$shared: SONAME $soname, $(grep -c 'dblock::' <<< "$symbols") dblock symbols exported, no internals"
fi
