#!/usr/bin/env bash
# `make run`: starts cellboxd in the foreground on 127.0.0.1 with a stable token, and prints how
# to connect. Override anything with CELLBOX_* variables (cellboxd --help lists them).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
state="$here/.cellbox"
mkdir -p "$state"
if [ -z "${CELLBOX_TOKEN:-}" ]; then
  [ -s "$state/token" ] || (umask 077; od -An -N24 -tx1 /dev/urandom | tr -d ' \n' > "$state/token")
  CELLBOX_TOKEN=$(cat "$state/token")
fi
export CELLBOX_TOKEN
export CELLBOX_IP=${CELLBOX_IP:-127.0.0.1} CELLBOX_PORT=${CELLBOX_PORT:-8888}
export CELLBOX_DATA_DIR=${CELLBOX_DATA_DIR:-$state/data}
url="http://$CELLBOX_IP:$CELLBOX_PORT"
cat <<MSG
cellbox: starting cellboxd on $url (Ctrl-C stops it)
  token:        $CELLBOX_TOKEN   (kept in .cellbox/token; set CELLBOX_TOKEN to choose one)
  REST:         curl -H "Authorization: token $CELLBOX_TOKEN" $url/api/kernelspecs
  AutoGen:      DockerJupyterCodeExecutor(jupyter_server=JupyterConnectionInfo(host="$CELLBOX_IP", use_https=False, port=$CELLBOX_PORT, token="$CELLBOX_TOKEN"))
  Jupyter:      jupyter server --gateway-url=$url --GatewayClient.auth_token=$CELLBOX_TOKEN
  CLI:          export CELLBOX_TOKEN=$CELLBOX_TOKEN; $here/build/bin/cellbox create
  MCP:          $url/mcp (header Authorization: token ...), or stdio: $here/build/bin/cellbox mcp
  Python:       sys.path.insert(0, "$here/clients/python"); from cellbox import Sandbox
MSG
exec "$here/build/bin/cellboxd"
