#!/usr/bin/env bash
# Installs the Debian packages (and, for tests, the npm packages) cellbox needs, only those missing.
#   install-deps.sh run    what building and running cellboxd needs
#   install-deps.sh bench  that, plus what make bench needs (Jupyter Server to compare with)
#   install-deps.sh test   that, plus what the test suites, the real-client tests and the
#                          bare-machine check (scripts/bare-machine-check.sh) need
# It asks nothing of the system but dpkg before it installs: the Makefile reads compiler flags
# only after this script has run (see its top).
set -euo pipefail
mode=${1:-run}
here=$(cd "$(dirname "$0")/.." && pwd)

# libcurl4-openssl-dev: the CLI's HTTP client, and cellboxd's for E2B's sandbox hosts (api/ports.c
# forwards requests to servers inside sandboxes through libcurl).
# dnsmasq-base: the resolver cellboxd runs for its sandboxes, which fills the nftables sets of
# the domains their allowOut/denyOut lists name (sandbox/network_dns.c); libnftables-dev: the
# library that makes those sets.
# libzmq3-dev: cellbox-kernel's Jupyter bridge (runtime/jupyter_bridge.c) speaks ZMQ to any installed
# Jupyter kernel. nodejs, node-acorn (a cell's top-level declarations and await are rewritten on
# its syntax tree), node-typescript: the JavaScript and TypeScript kernels. r-cran-irkernel: R.
# python3-dill: a Python kernel's variables are carried name by name where its process image
# cannot be restored (runtime/python/cellbox_kernel/namespace.py).
# procps, git: a sandbox's commands run the host's /usr, and `ps` and `git` are ones every agent
# expects (E2B's sandbox.git.* runs git through commands; a bare Debian has neither).
run_pkgs=(build-essential pkg-config libmicrohttpd-dev libwslay-dev libjansson-dev libssl-dev
  libseccomp-dev libpython3.11-dev libcurl4-openssl-dev libarchive-dev zlib1g-dev e2fsprogs tar python3-ipython python3-numpy python3-pandas
  python3-matplotlib python3-matplotlib-inline procps git libnftables-dev libnl-route-3-dev iproute2 dnsmasq-base
  libzmq3-dev nodejs node-acorn node-typescript r-cran-irkernel python3-dill)
# nodejs, npm: make bench times E2B's npm SDK beside /v1 (tests/clients/node/e2b_bench.mjs).
bench_pkgs=(python3-websocket python3-requests jupyter-server python3-jupyter-server
  python3-jupyter-client python3-ipykernel nodejs npm ca-certificates)
# ca-certificates: npm fetches the client-test modules over https (a bare Debian has no CA list).
# dnsmasq-base: the DNS server of the tests' own small internet (tests/helpers/test_internet.py).
test_pkgs=("${bench_pkgs[@]}" python3-pytest python3-yaml python3-jsonschema
  python3-pip python3-setuptools python3-wheel mmdebstrap clang libclang-rt-14-dev nftables dnsmasq-base)

pkgs=("${run_pkgs[@]}")
case $mode in
  run) ;;
  bench) pkgs+=("${bench_pkgs[@]}") ;;
  test) pkgs+=("${test_pkgs[@]}") ;;
  *) echo "usage: $0 run|bench|test" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  # nodejs/npm may come from outside apt (a preinstalled toolchain): a working binary is enough.
  case $p in nodejs) command -v node >/dev/null && continue ;; npm) command -v npm >/dev/null && continue ;; esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "cellbox: installing missing packages: ${missing[*]}" >&2
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "cellbox: installing needs root: run this as root, or install sudo" >&2; exit 1; }
    sudo_cmd=(sudo)
  fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if { [ "$mode" = test ] || [ "$mode" = bench ]; } && [ -f "$here/tests/clients/node/package.json" ]; then
  node_dir="$here/tests/clients/node"
  # Installed, and from the current lock file (a dependency added later is installed too).
  if [ ! -d "$node_dir/node_modules" ] || [ "$node_dir/package-lock.json" -nt "$node_dir/node_modules/.package-lock.json" ]; then
    echo "cellbox: installing npm packages for the client tests and make bench" >&2
    (cd "$here/tests/clients/node" && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi
