#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run on the development machine before a session with the GPU machine (the device tool). That
# machine has CUDA, CMake, ninja and Python but no network and no Catch2, and the working tree
# travels there without its ignored folders and without .git. This copies into .deps/ (ignored by
# git; the tool sends it when the call names it in `carry`):
#   - Catch2's headers, CMake package and libraries, found as find_package(Catch2) would find
#     them here, in the same layout under .deps/catch2, so that -DCatch2_DIR=... works there;
#   - commit.txt: the commit the working tree is at (-dirty when tracked files changed), which
#     scripts/gpu-run.sh and benchmarks/run_gpu.sh record in the results.
# Then it checks what would travel against the tool's 64 MiB and prints the carry list.
#
#   scripts/gpu-prepare.sh [--catch2-dir DIR]   DIR: the directory holding Catch2Config.cmake
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps="$root/.deps"
catch2_dir="${Catch2_DIR:-}"

die() {
  echo "gpu-prepare.sh: $*" >&2
  exit 1
}
while [ $# -gt 0 ]; do
  case "$1" in
    --catch2-dir) catch2_dir="${2:?--catch2-dir needs a directory}"; shift 2 ;;
    -h | --help) sed -n '3,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

cd "$root"
git check-ignore -q .deps/ 2>/dev/null ||
  die ".deps/ is not ignored by git: add /.deps/ to .gitignore (or .git/info/exclude) first"

# Catch2 --------------------------------------------------------------------------------------------
if [ -z "$catch2_dir" ]; then
  for d in /usr/lib/cmake/Catch2 /usr/share/cmake/Catch2 /usr/local/lib/cmake/Catch2 \
    /usr/local/share/cmake/Catch2 /usr/lib/x86_64-linux-gnu/cmake/Catch2 \
    /usr/local/lib64/cmake/Catch2 /usr/lib64/cmake/Catch2; do
    if [ -f "$d/Catch2Config.cmake" ]; then catch2_dir="$d"; break; fi
  done
fi
if [ -z "$catch2_dir" ] || [ ! -f "$catch2_dir/Catch2Config.cmake" ]; then
  die "no Catch2 CMake package found: run scripts/install-deps.sh --tests, or give --catch2-dir"
fi
catch2_dir="$(cd "$catch2_dir" && pwd -P)"
targets="$catch2_dir/Catch2Targets.cmake"
[ -f "$targets" ] || die "no Catch2Targets.cmake beside $catch2_dir/Catch2Config.cmake"

# The package finds its prefix by going up from its own directory: the same number of levels here.
# shellcheck disable=SC2016  # the pattern is CMake's, not the shell's
ups="$(grep -c 'get_filename_component(_IMPORT_PREFIX "${_IMPORT_PREFIX}" PATH)' "$targets" || true)"
[ "$ups" -ge 1 ] || die "cannot tell Catch2's install prefix from $targets"
prefix="$catch2_dir"
for _ in $(seq "$ups"); do prefix="$(dirname "$prefix")"; done
relative="${catch2_dir#"$prefix"/}"

dest="$deps/catch2"
rm -rf "$dest"
mkdir -p "$dest/$relative" "$dest/include"
cp -a "$catch2_dir/." "$dest/$relative/"
[ -d "$prefix/include/catch2" ] || die "no $prefix/include/catch2"
cp -a "$prefix/include/catch2" "$dest/include/"
# The files the imported targets name (Catch2 v2: libCatch2WithMain.a; v3: its libraries).
# shellcheck disable=SC2016  # the pattern is CMake's, not the shell's
grep -ho '${_IMPORT_PREFIX}/[^" )]*' "$catch2_dir"/Catch2Targets*.cmake | sort -u |
  while read -r ref; do
    file="${ref#\$\{_IMPORT_PREFIX\}/}"
    [ "$file" != include ] || continue
    [ -e "$prefix/$file" ] || continue
    mkdir -p "$dest/$(dirname "$file")"
    cp -a "$prefix/$file" "$dest/$file"
  done
version="$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")/\1/p' "$catch2_dir/Catch2ConfigVersion.cmake" |
  head -n 1)"

# The commit ------------------------------------------------------------------------------------------
commit="$(git rev-parse HEAD)"
[ -z "$(git status --porcelain --untracked-files=no)" ] || commit="$commit-dirty"
echo "$commit" >"$deps/commit.txt"

# What travels --------------------------------------------------------------------------------------
# Tracked files and untracked files that git does not ignore, as they are now, plus .deps/.
tree_bytes="$(git ls-files -z --cached --others --exclude-standard |
  xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')"
deps_bytes="$(du -sb "$deps" | cut -f1)"
total=$((tree_bytes + deps_bytes))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

echo "gpu-prepare.sh: Catch2 ${version:-?} from $prefix -> .deps/catch2 ($(mib "$(du -sb "$dest" | cut -f1)"))"
echo "gpu-prepare.sh: Catch2_DIR there: .deps/catch2/$relative"
echo "gpu-prepare.sh: commit $commit (.deps/commit.txt)"
echo "gpu-prepare.sh: what travels: working tree $(mib "$tree_bytes") + .deps $(mib "$deps_bytes") = $(mib "$total") of 64 MiB"
[ "$total" -lt $((60 * 1048576)) ] ||
  echo "gpu-prepare.sh: WARNING: close to the tool's 64 MiB: remove large untracked files" >&2
case "$commit" in
  *-dirty) echo "gpu-prepare.sh: note: tracked files have changes; results will say -dirty" ;;
esac
echo
echo 'carry: [".deps"]'
# $OUT is the device machine's, expanded there.
cat <<'CALLS'
calls (docs/gpu-checklist.md), .deps carried on every one; LEFT is status's budget_left_s read
just before the call:
  run(command="bash scripts/gpu-run.sh tests \"$OUT\" --device-left LEFT", carry=[".deps"], timeout_s=600)
  run(command="bash scripts/gpu-run.sh bench \"$OUT\" --device-left LEFT", carry=[".deps"], timeout_s=600)
CALLS
