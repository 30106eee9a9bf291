#!/usr/bin/env bash
# The meson build installs what the CMake build installs: both are installed
# into scratch directories (DESTDIR) and their file lists compared, with the
# libraries and the .pc file that each build puts in its own libdir (CMake's
# lib, meson's lib/<multiarch> on Debian) written LIBDIR/. Prints the files
# only one of them installs and fails on any.
#
#   scripts/install_parity.sh [CMAKE_BUILD_DIR] [MESON_BUILD_DIR]   (build, build-meson)
set -euo pipefail
cd "$(dirname "$0")/.."
CMAKE_BUILD="${1:-build}"
MESON_BUILD="${2:-build-meson}"
WORK=$(mktemp -d /tmp/aggswitch-install.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

DESTDIR="$WORK/cmake" cmake --install "$CMAKE_BUILD" >"$WORK/cmake.log" ||
  { cat "$WORK/cmake.log"; exit 1; }
meson install -C "$MESON_BUILD" --destdir "$WORK/meson" >"$WORK/meson.log" ||
  { cat "$WORK/meson.log"; exit 1; }

cmake_prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$CMAKE_BUILD/CMakeCache.txt")
cmake_libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$CMAKE_BUILD/CMakeCache.txt")
read -r meson_prefix meson_libdir < <(meson introspect --buildoptions "$MESON_BUILD" |
  python3 -c 'import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
print(o["prefix"], o["libdir"])')

# files ROOT PREFIX LIBDIR: every file under ROOT; one in PREFIX/LIBDIR or its
# pkgconfig/ as LIBDIR/NAME.
files() {
  (cd "$1" && find . -type f -o -type l) | sed -e 's|^\.||' \
    -e "s|^$2/$3/\([^/]*\)\$|LIBDIR/\1|" -e "s|^$2/$3/pkgconfig/\([^/]*\)\$|LIBDIR/pkgconfig/\1|" | sort
}
files "$WORK/cmake" "$cmake_prefix" "$cmake_libdir" >"$WORK/cmake.files"
files "$WORK/meson" "$meson_prefix" "$meson_libdir" >"$WORK/meson.files"
if ! diff "$WORK/cmake.files" "$WORK/meson.files" >"$WORK/diff"; then
  echo "the two builds install different files (< CMake only, > meson only):"
  grep '^[<>]' "$WORK/diff"
  exit 1
fi
# The unit both configure from deploy/systemd/aggswitch.service.in.
unit=$cmake_prefix/lib/systemd/system/aggswitch.service
if ! cmp -s "$WORK/cmake$unit" "$WORK/meson$meson_prefix/lib/systemd/system/aggswitch.service"; then
  echo "the two builds install different units:"
  diff "$WORK/cmake$unit" "$WORK/meson$meson_prefix/lib/systemd/system/aggswitch.service" || true
  exit 1
fi
echo "install parity: meson installs the $(wc -l <"$WORK/cmake.files") files CMake installs"
