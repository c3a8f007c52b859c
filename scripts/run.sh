#!/usr/bin/env bash
# `make run`: starts cellboxd in the foreground on 127.0.0.1 with a stable token, and prints how
# to connect. Override anything with CELLBOX_* variables (cellboxd --help lists them).
# CELLBOX_RUN_CHECK=1 checks instead of serving: cellboxd starts in the background, must answer a
# cell over HTTP with the token printed below (and refuse a wrong one), and is stopped by its pid;
# the exit status says whether it worked (scripts/bare-machine-check.sh uses it).
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
[ "${CELLBOX_RUN_CHECK:-}" = 1 ] || exec "$here/build/bin/cellboxd"

"$here/build/bin/cellboxd" &
daemon=$!
stop_daemon() {   # by its pid: SIGTERM, SIGKILL after 20 s
  kill "$daemon" 2>/dev/null || return 0
  for _ in $(seq 200); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$daemon" 2>/dev/null || true
  wait "$daemon" 2>/dev/null || true
}
trap stop_daemon EXIT
/usr/bin/python3 - "$url" "$CELLBOX_TOKEN" "$daemon" <<'CHECK'
import json, os, sys, time, urllib.error, urllib.request
url, token, daemon = sys.argv[1], sys.argv[2], int(sys.argv[3])

def request(path, token, body=None, timeout=10):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, headers={"Authorization": f"token {token}"})
    # Straight to cellboxd: a proxy the user exported has no business with 127.0.0.1.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()

for attempt in range(240):      # up to a minute for cellboxd to listen
    if not os.path.exists(f"/proc/{daemon}") or open(f"/proc/{daemon}/stat").read().split()[2] == "Z":
        sys.exit("cellbox: check failed: cellboxd exited before it listened (its log is above)")
    try:
        request("/api", token)
        break
    except OSError:
        time.sleep(0.25)
else:
    sys.exit("cellbox: check failed: cellboxd did not listen within a minute")

status, _ = request("/api/kernelspecs", "not-" + token)
if status != 403 and status != 401:
    sys.exit(f"cellbox: check failed: a wrong token got HTTP {status}, not 401/403")
code = "import pandas as pd\nprint(pd.DataFrame({'x': [1, 2, 3]}).x.sum() * 7)"
status, body = request("/v1/run", token, {"language": "python", "code": code}, timeout=120)
if status != 200 or json.loads(body).get("stdout") != "42\n":
    sys.exit(f"cellbox: check failed: a cell over /v1/run got HTTP {status}: {body[:2000]}")
print("cellbox: check passed: cellboxd answered a cell (pandas) over HTTP with the printed token")
CHECK
