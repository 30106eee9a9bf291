#!/usr/bin/env bash
# System test: the Debian packages as an operator installs them.
#
# cpack builds aggswitch and python3-aggswitch from a build tree; dpkg -i
# installs them into this machine, so dpkg checks that every dependency they
# declare is a Debian package that is there. Then, from the installed files:
# aggswitch --check-config accepts the installed example config, and
# rejects a broken copy naming the key and line; systemd-analyze verify
# accepts the unit (its ExecStart binaries included); every program has its
# man page, made from its --help; aggctl and the Python package run. dpkg
# --purge takes it all out again, and what the test moved aside (an earlier
# cmake --install of the Python package or of /etc/aggswitch) comes back.
#
# Usage: package_test.sh BUILD_DIR    (root: dpkg)
set -u
BUILD=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"

WORK=$(mktemp -d /tmp/aggswitch-pkg.XXXXXX)
PREFIX=$(awk -F= '/^CMAKE_INSTALL_PREFIX:/ {print $2}' "$BUILD/CMakeCache.txt")
CONFIG_DIR=$(awk -F= '/^AGG_CONFIG_DIR:/ {print $2}' "$BUILD/CMakeCache.txt")
PY_SITE=$(/usr/bin/python3 -c 'import sys; print("lib/python%d.%d/dist-packages" % sys.version_info[:2])')
PROGRAMS="aggswitch:8 aggctl:8 agg-worker:1 agg-ps:1 agg-gen:1 agg-intcollector:8 agg-cached:8 agg-load:1"
ASIDE=()

# Files an earlier `cmake --install` left where the packages go: moved aside
# for the test, put back after it.
set_aside() {
  if [ -e "$1" ]; then mkdir -p "$WORK/aside$(dirname "$1")"; mv "$1" "$WORK/aside$1"; ASIDE+=("$1"); fi
}
cleanup() {
  dpkg --purge python3-aggswitch aggswitch >/dev/null 2>&1
  for p in "${ASIDE[@]}"; do mkdir -p "$(dirname "$p")"; mv "$WORK/aside$p" "$p"; done
  rm -rf "$WORK"
}
trap cleanup EXIT
if dpkg-query -W aggswitch >/dev/null 2>&1; then
  echo "SKIP: an aggswitch package is installed on this machine; the test would replace it"
  exit 0
fi
set_aside "$CONFIG_DIR"
set_aside "$PREFIX/$PY_SITE/aggswitch"

build_packages() {
  (cd "$WORK" && cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$WORK/out") || return 1
  ls "$WORK"/out/aggswitch_*.deb "$WORK"/out/python3-aggswitch_*.deb >/dev/null || return 1
  report "$(cd "$WORK/out" && ls ./*.deb | tr '\n' ' ')"
  report "aggswitch depends on: $(dpkg-deb -f "$WORK"/out/aggswitch_*.deb Depends | cut -c1-300)"
  # dpkg-shlibdeps found the switch's libraries: DPDK's among them.
  dpkg-deb -f "$WORK"/out/aggswitch_*.deb Depends | grep -q 'librte-'
}
check "cpack builds aggswitch and python3-aggswitch; dpkg-shlibdeps names their libraries' packages" build_packages

install_packages() { dpkg -i "$WORK"/out/aggswitch_*.deb "$WORK"/out/python3-aggswitch_*.deb; }
check "dpkg -i installs both, every dependency satisfied" install_packages

check_installed_config() {
  local out
  out=$("$PREFIX/bin/aggswitch" --config "$CONFIG_DIR/aggswitch.yaml" --check-config) || return 1
  report "$out"
  dpkg-query -L aggswitch | grep -qx "$CONFIG_DIR/aggswitch.yaml" &&
    dpkg-query -W -f='${Conffiles}\n' aggswitch | grep -q "$CONFIG_DIR/aggswitch.yaml"
}
check "the installed aggswitch --check-config accepts the installed example (a conffile)" check_installed_config

check_broken_config() {
  local out
  sed 's/^  udp_port: 47000/  udp_port: 99999/' "$CONFIG_DIR/aggswitch.yaml" >"$WORK/broken.yaml"
  out=$("$PREFIX/bin/aggswitch" --config "$WORK/broken.yaml" --check-config 2>&1)
  local rc=$?
  report "$(echo "$out" | head -1)"
  [ "$rc" -eq 2 ] && echo "$out" | grep -q 'aggregation.udp_port' &&
    echo "$out" | grep -q "broken.yaml:$(grep -n 'udp_port: 99999' "$WORK/broken.yaml" | cut -d: -f1)"
}
check "a broken copy is refused, naming the key and the line" check_broken_config

check_unit() {
  local unit="$PREFIX/lib/systemd/system/aggswitch.service"
  [ -f "$unit" ] || return 1
  SYSTEMD_LOG_LEVEL=warning systemd-analyze verify "$unit" || return 1
  grep -q "^ExecStart=$PREFIX/bin/aggswitch --config $CONFIG_DIR/aggswitch.yaml$" "$unit" &&
    grep -q '^Type=notify$' "$unit" && grep -q '^WatchdogSec=' "$unit" &&
    grep -q '^ExecReload=/bin/kill -HUP $MAINPID$' "$unit"
  report "$(systemd-analyze security --offline=yes "$unit" 2>/dev/null | tail -1)"
}
check "systemd-analyze verify accepts the installed unit: Type=notify, a watchdog, reload by SIGHUP" check_unit

check_man_pages() {
  local entry name section page
  for entry in $PROGRAMS; do
    name=${entry%:*} section=${entry#*:}
    page="$PREFIX/share/man/man$section/$name.$section"
    [ -f "$page" ] || { echo "no $page"; return 1; }
    # Made from the program's --help: the page lists the options the program has.
    grep -q '^\.SH' "$page" && grep -q -- '-\\-help' "$page" || { echo "$page is not a help2man page"; return 1; }
  done
  grep -q -- 'check\\-config' "$PREFIX/share/man/man8/aggswitch.8"
}
check "every installed program has its man page, made from its --help" check_man_pages

check_tools_run() {
  local libdir
  libdir=$(awk -F= '/^CMAKE_INSTALL_LIBDIR:/ {print $2}' "$BUILD/CMakeCache.txt")
  "$PREFIX/bin/aggctl" --help >/dev/null || return 1
  "$PREFIX/bin/agg-worker" --help >/dev/null || return 1
  (cd / && /usr/bin/python3 -c 'import aggswitch, aggswitch.cache; print(aggswitch.__file__)') >"$WORK/py.out" || return 1
  report "python3 imports $(cat "$WORK/py.out")"
  grep -q "^$PREFIX/$PY_SITE/aggswitch/" "$WORK/py.out" || return 1
  PKG_CONFIG_PATH="$PREFIX/$libdir/pkgconfig" pkg-config --print-errors --exists aggswitch-client
}
check "the installed tools run, python3 imports the packaged aggswitch, pkg-config finds the client" check_tools_run

check_purge() {
  dpkg --purge python3-aggswitch aggswitch || return 1
  [ ! -e "$PREFIX/bin/aggswitch" ] && [ ! -e "$CONFIG_DIR/aggswitch.yaml" ] &&
    [ ! -e "$PREFIX/lib/systemd/system/aggswitch.service" ]
}
check "dpkg --purge removes the binaries, the unit and the config" check_purge

finish
