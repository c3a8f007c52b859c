#!/usr/bin/env bash
# bare-machine-check.sh: `make run` and `make test` on a bare Debian, the way a new user runs them.
#
# "Bare" is a fresh Debian and nothing a developer adds: mmdebstrap's minbase variant (the
# Essential and Priority: required packages and apt, as in the debian image or a minimal
# install) of this machine's release, from this machine's own apt sources, plus `make`; then a
# clean `git clone` of this repository's HEAD. No compiler, pkg-config, Python, libraries or
# node: the two commands must install what they need themselves.
#
# The root gets what a machine has: /proc, /sys with the cgroups, /dev with the loop devices,
# /dev/pts, a fresh /dev/shm, tmpfs on /run and /tmp, the host's /etc/resolv.conf and /etc/hosts
# and its local certificate authorities (/usr/local/share/ca-certificates: a network that inspects
# TLS needs its CA, and npm downloads over https). The commands run as root (installing packages
# needs root) in a private mount namespace and a pid namespace of their own, where the root is
# pivot_root'ed to and the host's tree detached: / is the namespace's root as on a machine (under a
# chroot, paths the daemon opened would read as host paths inside sandboxes). When the namespace
# ends, every mount in it goes and every process left in it is killed; the trap then removes the
# root by its path, on failure too.
#
#   scripts/bare-machine-check.sh [run|test|all]      (default all)
#     run   make run, with CELLBOX_RUN_CHECK=1: cellboxd must answer a cell over HTTP with the
#           token it printed, then it is stopped (scripts/run.sh)
#     test  make test: the whole suite, as on the host
#   CELLBOX_BARE_KEEP=1 keeps the root (its path is printed) to look into after a failure.
#   CELLBOX_BARE_ROOT=DIR reuses a root kept so (no mmdebstrap; its /cellbox becomes a fresh clone
#     of HEAD, what `make` installed there stays) and keeps it again.
#   CELLBOX_BARE_PYTEST_ARGS='tests/x.py::test_y -x' makes `test` install, build the daemon (and its
#     ASan build, the one the suite runs) and run only that pytest selection instead of `make test`.
set -euo pipefail
what=${1:-all}
case $what in run | test | all) ;; *) echo "usage: $0 [run|test|all]" >&2; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "bare-machine-check: needs root (mmdebstrap, mounts, chroot)" >&2; exit 1; }
for tool in mmdebstrap unshare git; do
  command -v "$tool" >/dev/null || { echo "bare-machine-check: $tool is missing: run scripts/install-deps.sh test" >&2; exit 1; }
done
repo=$(cd "$(dirname "$0")/.." && pwd)
[ -z "$(git -C "$repo" status --porcelain --untracked-files=no)" ] ||
  echo "bare-machine-check: note: uncommitted changes are not checked (the root gets a clone of HEAD)" >&2

if [ -n "${CELLBOX_BARE_ROOT:-}" ]; then
  [ -x "$CELLBOX_BARE_ROOT/bin/bash" ] || { echo "bare-machine-check: $CELLBOX_BARE_ROOT is no kept root" >&2; exit 1; }
  root=$(cd "$CELLBOX_BARE_ROOT" && pwd)
  CELLBOX_BARE_KEEP=1
else
  root=$(mktemp -d "${TMPDIR:-/tmp}/cellbox-bare.XXXXXX")
fi
namespace_pid=
step_start=$SECONDS
step() { # name: announces the next step and starts its clock
  echo "bare-machine-check: ---- $1 ($(date -u +%H:%M:%S))"
  step_start=$SECONDS
}
took() { echo "bare-machine-check: ---- $1 took $((SECONDS - step_start)) s"; }

cleanup() {
  local status=$?
  if [ -n "$namespace_pid" ] && kill -0 "$namespace_pid" 2>/dev/null; then
    kill "$namespace_pid" 2>/dev/null || true   # unshare --kill-child ends the namespace's pid 1
    wait "$namespace_pid" 2>/dev/null || true
  fi
  # The commands' mounts lived in their namespace and went with it; what is left under the root
  # here (mmdebstrap's own, had it been stopped midway) is detached by path, deepest first.
  local point removing=$SECONDS
  while read -r point; do umount -l "$point" 2>/dev/null || true; done < <(
    awk -v root="$root" '$5 == root || index($5, root "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  if [ "${CELLBOX_BARE_KEEP:-}" = 1 ]; then
    echo "bare-machine-check: root kept in $root (remove it with: rm -rf --one-file-system $root)"
  else
    rm -rf --one-file-system "$root"
    echo "bare-machine-check: ---- removing the root took $((SECONDS - removing)) s"
  fi
  echo "bare-machine-check: $([ "$status" -eq 0 ] && echo passed || echo "FAILED (status $status)") in $SECONDS s"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# This machine's release and apt sources (deb822 .sources or one-line .list files alike).
. /etc/os-release
sources=()
for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -s "$file" ] && grep -q '^[^#]' "$file" && sources+=("$file")
done
[ ${#sources[@]} -gt 0 ] || { echo "bare-machine-check: no apt sources in /etc/apt" >&2; exit 1; }

if [ -z "${CELLBOX_BARE_ROOT:-}" ]; then
  step "a bare $ID $VERSION_CODENAME (minbase + make) in $root"
  mmdebstrap --quiet --variant=minbase --include=make "$VERSION_CODENAME" "$root" "${sources[@]}"
  cp /etc/resolv.conf /etc/hosts "$root/etc/"
  if [ -d /usr/local/share/ca-certificates ]; then   # ca-certificates, once installed, trusts these
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
  fi
else
  step "reusing the root $root"
  rm -rf --one-file-system "$root/cellbox"
fi
git clone --quiet --no-hardlinks --no-checkout "$repo" "$root/cellbox"
git -C "$root/cellbox" checkout --quiet --detach "$(git -C "$repo" rev-parse HEAD)"
echo "bare-machine-check: $(du -sh --exclude=cellbox "$root" | cut -f1) root, repository at $(git -C "$root/cellbox" log --oneline -1)"
took "making the root"

# Runs one command in the root, in its own mount and pid namespace, with a new user's
# environment (PATH and HOME only) plus the given NAME=VALUE pairs.
in_root() {
  local command=$1; shift
  unshare --mount --pid --fork --kill-child --propagation private -- \
    /bin/bash -euc '
      root=$1; shift
      mount --bind "$root" "$root"     # pivot_root needs the new root to be a mount point
      mount -t proc proc "$root/proc"
      mount --rbind /sys "$root/sys"
      mount --rbind /dev "$root/dev"
      mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"
      mount -t tmpfs -o mode=755,nosuid,nodev run "$root/run"
      mount -t tmpfs -o mode=1777,nosuid,nodev tmp "$root/tmp"
      cd "$root"
      pivot_root . mnt                 # /mnt: an empty directory in every Debian root
      cd /
      umount -l /mnt                   # the host'"'"'s tree is gone from this namespace
      exec /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
    ' bare-root "$root" "$@" /bin/bash -ec "cd /cellbox && $command" &
  namespace_pid=$!
  local status=0
  wait "$namespace_pid" || status=$?
  namespace_pid=
  return "$status"
}

free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

if [ "$what" != test ]; then
  step "make run (CELLBOX_RUN_CHECK=1)"
  in_root "make run" CELLBOX_RUN_CHECK=1 CELLBOX_PORT="$(free_port)"
  took "make run"
fi
if [ "$what" != run ]; then
  if [ -n "${CELLBOX_BARE_PYTEST_ARGS:-}" ]; then
    step "pytest $CELLBOX_BARE_PYTEST_ARGS"
    in_root "scripts/install-deps.sh test && make --no-print-directory build build/tests/without-io-uring &&
      make --no-print-directory BUILD=build-asan SANITIZE=1 build &&
      CELLBOX_BUILD=/cellbox/build CELLBOX_DAEMON=/cellbox/build-asan/bin/cellboxd \
      /usr/bin/python3 -m pytest -q -p no:cacheprovider $CELLBOX_BARE_PYTEST_ARGS"
    took "pytest"
  else
    step "make test"
    in_root "make test"
    took "make test"
  fi
fi
