// E2B's getHost through cellboxd, with the official SDK (@e2b/code-interpreter, which wraps `e2b`)
// unchanged, pointed at cellboxd by the environment alone:
//
//   E2B_API_URL=http://127.0.0.1:8888 E2B_SANDBOX_URL=http://127.0.0.1:8888 \
//   E2B_API_KEY=<cellbox token> node e2b_ports.mjs
//
// Two sandboxes each start a small HTTP server on 127.0.0.1:8000 inside (Python's http.server:
// files, and POST echoing what it received). Then, through cellboxd's port with the Host
// getHost(8000) names: a file, a 5 MiB file (the proxy pauses the inner server while the client
// reads), a POST with a body, each sandbox reaching its own server, a port nothing listens on and
// an unknown sandbox (502s with their messages), and what the inner server saw of cellbox's
// token (nothing). Prints one JSON summary line, {"ok", "steps": {name: {ok, ...}}}, exits 0 when
// every step passed, 1 otherwise, 2 on a hang (global deadline). tests/clients/test_e2b_ports.py
// checks each step's details again.
import { Sandbox } from '@e2b/code-interpreter';
import http from 'node:http';
import WebSocket from 'ws';
import crypto from 'node:crypto';

import { scenario } from './scenario.mjs';

const { step, finish } = scenario('e2b_ports.mjs');

const daemon = new URL(process.env.E2B_API_URL);
const key = process.env.E2B_API_KEY;
const PORT = 8000;
const WS_PORT = 8001;
const B_ONLY_PORT = 8002; // only the second sandbox listens there

// One request to cellboxd's own address with the sandbox host in the Host header (as a DNS
// name pointing at cellboxd would give). Resolves with status, headers and the body's bytes.
function request(host, path, { method = 'GET', body, headers = {} } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: daemon.hostname, port: daemon.port, method, path,
      headers: { Host: host, 'E2B-Traffic-Access-Token': key, ...headers },
      timeout: 30000,
    }, res => {
      const chunks = [];
      res.on('data', c => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('request timed out')));
    req.on('error', reject);
    if (body) req.write(body);
    req.end();
  });
}

const sha256 = bytes => crypto.createHash('sha256').update(bytes).digest('hex');

// The inner server: GET serves files under /workspace/www; POST answers JSON with what it got
// (method, path, its Host, the headers it saw, the body's length and sha256).
const SERVER = `
import hashlib, http.server, json, sys
class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory='/workspace/www', **k)
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get('Content-Length') or 0))
        answer = json.dumps({'method': 'POST', 'path': self.path, 'host': self.headers.get('Host'),
                             'headers': {k.lower(): v for k, v in self.headers.items()},
                             'length': len(body), 'sha256': hashlib.sha256(body).hexdigest()}).encode()
        self.send_response(201)
        self.send_header('Content-Type', 'application/json')
        self.send_header('X-Inner', 'yes')
        self.send_header('Content-Length', str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), Handler).serve_forever()
`;

// A WebSocket echo server with no library (the sandbox has what the host's /usr has, and Debian's
// python3-websockets may be absent): the handshake, then each frame's payload unmasked and sent
// back, text prefixed with "echo: ".
const WS_SERVER = `
import base64, hashlib, socket, struct, sys, threading
GUID = b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
def read_exact(c, n):
    data = b''
    while len(data) < n:
        part = c.recv(n - len(data))
        if not part:
            raise EOFError
        data += part
    return data
def serve(c):
    head = b''
    while b'\\r\\n\\r\\n' not in head:
        head += c.recv(4096)
    key = [l.split(b':', 1)[1].strip() for l in head.split(b'\\r\\n') if l.lower().startswith(b'sec-websocket-key:')][0]
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    c.sendall(b'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: ' + accept + b'\\r\\nX-Inner-WS: yes\\r\\n\\r\\n')
    try:
        while True:
            b0, b1 = read_exact(c, 2)
            opcode, n = b0 & 15, b1 & 127
            if n == 126: n = struct.unpack('>H', read_exact(c, 2))[0]
            elif n == 127: n = struct.unpack('>Q', read_exact(c, 8))[0]
            mask = read_exact(c, 4)
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(read_exact(c, n)))
            if opcode == 8:
                c.sendall(bytes([0x88, len(payload)]) + payload)
                break
            if opcode == 1:
                payload = b'echo: ' + payload
            size = len(payload)
            header = bytes([0x80 | opcode]) + (bytes([size]) if size < 126 else bytes([126]) + struct.pack('>H', size) if size < 65536 else bytes([127]) + struct.pack('>Q', size))
            c.sendall(header + payload)
    except EOFError:
        pass
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', int(sys.argv[1])))
s.listen(8)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`;

// Starts the server in the sandbox (a child of its kernel) and waits until it accepts.
async function startServer(sandbox, name, bigBytes, ports = [PORT, WS_PORT]) {
  await sandbox.files.write('/workspace/server.py', SERVER);
  await sandbox.files.write('/workspace/ws_echo.py', WS_SERVER);
  await sandbox.files.write('/workspace/www/hello.txt', `hello from ${name}\n`);
  if (bigBytes) await sandbox.files.write('/workspace/www/big.bin', new Uint8Array(bigBytes));
  const run = await sandbox.runCode(`
import socket, subprocess, time
for port in ${JSON.stringify(ports)}:
    script = '/workspace/ws_echo.py' if port == ${WS_PORT} else '/workspace/server.py'
    subprocess.Popen(['python3', script, str(port)], start_new_session=True)
for port in ${JSON.stringify(ports)}:
    for attempt in range(100):
        try:
            socket.create_connection(('127.0.0.1', port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        raise RuntimeError(f'the server on {port} did not start')
print('listening')
`);
  if (run.error) throw new Error(`${run.error.name}: ${run.error.value}`);
  return run.logs.stdout.join('');
}

let a, b;
const big = crypto.randomBytes(5 * 1024 * 1024);
await step('create', async () => {
  a = await Sandbox.create({ timeoutMs: 120_000 });
  b = await Sandbox.create({ timeoutMs: 120_000 });
  return { ok: !!(a?.sandboxId && b?.sandboxId), a: a.sandboxId, b: b.sandboxId };
});

if (a && b) {
  await step('servers', async () => {
    const started = [await startServer(a, 'sandbox a', big), await startServer(b, 'sandbox b', null, [PORT, WS_PORT, B_ONLY_PORT])];
    return { ok: started.every(s => s.includes('listening')), started };
  });

  await step('get_host', async () => {
    return { ok: true, host: a.getHost(PORT), id: a.sandboxId };
  });

  await step('get_file', async () => {
    const res = await request(a.getHost(PORT), '/hello.txt');
    return { ok: res.status === 200, status: res.status, text: res.body.toString(),
             content_type: res.headers['content-type'] };
  });

  await step('big_file', async () => {
    const res = await request(a.getHost(PORT), '/big.bin');
    return { ok: res.status === 200, status: res.status, length: res.body.length,
             same: sha256(res.body) === sha256(big) };
  });

  await step('post', async () => {
    const body = crypto.randomBytes(300 * 1024);
    const res = await request(a.getHost(PORT), '/submit?x=1&y=a%20b', {
      method: 'POST', body,
      headers: { 'Content-Type': 'application/octet-stream', 'Content-Length': body.length, 'X-Custom': 'kept' },
    });
    const seen = JSON.parse(res.body.toString());
    return { ok: res.status === 201, status: res.status, x_inner: res.headers['x-inner'], seen,
             sent_length: body.length, sent_sha256: sha256(body) };
  });

  await step('own_server_each', async () => {
    const fromA = await request(a.getHost(PORT), '/hello.txt');
    const fromB = await request(b.getHost(PORT), '/hello.txt');
    return { ok: fromA.status === 200 && fromB.status === 200, a: fromA.body.toString(), b: fromB.body.toString() };
  });

  await step('neighbour_port', async () => {
    const throughA = await request(a.getHost(B_ONLY_PORT), '/hello.txt');
    const throughB = await request(b.getHost(B_ONLY_PORT), '/hello.txt');
    return { ok: throughA.status === 502 && throughB.status === 200, through_a: throughA.status,
             through_b: throughB.status, through_b_text: throughB.body.toString() };
  });

  await step('websocket', async () => {
    const ws = new WebSocket(`ws://${daemon.host}/chat`, {
      headers: { Host: a.getHost(WS_PORT), 'E2B-Traffic-Access-Token': key },
    });
    let upgradeHeaders = {};
    ws.on('upgrade', res => { upgradeHeaders = res.headers; });
    const received = [];
    const binary = crypto.randomBytes(200 * 1024);
    await new Promise((resolve, reject) => {
      ws.on('error', reject);
      ws.on('unexpected-response', (req, res) => {
        const chunks = [];
        res.on('data', c => chunks.push(c));
        res.on("end", () => reject(new Error(`${res.statusCode}: ${JSON.stringify(res.rawHeaders)} ${Buffer.concat(chunks)}`)));
      });
      ws.on('open', () => { ws.send('ping-1'); ws.send(binary); ws.send('ping-2'); });
      ws.on('message', (data, isBinary) => {
        received.push(isBinary ? { binary: data.length, same: sha256(data) === sha256(binary) } : data.toString());
        if (received.length === 3) ws.close(1000, 'done');
      });
      ws.on('close', (code) => { received.push({ closed: code }); resolve(); });
    });
    return { ok: received.length === 4, received, x_inner_ws: upgradeHeaders['x-inner-ws'] };
  });

  await step('nothing_listening', async () => {
    const res = await request(a.getHost(8009), '/');
    return { ok: res.status === 502, status: res.status, body: JSON.parse(res.body.toString()) };
  });

  await step('unknown_sandbox', async () => {
    const host = a.getHost(PORT).replace(a.sandboxId, '00000000-0000-4000-8000-000000000000');
    const res = await request(host, '/hello.txt');
    return { ok: res.status === 502, status: res.status, body: JSON.parse(res.body.toString()) };
  });

  await step('envd_port', async () => {
    const res = await request(a.getHost(49983), '/health');
    return { ok: res.status === 200 || res.status === 204, status: res.status };
  });

  await step('no_token', async () => {
    const res = await request(a.getHost(PORT), '/hello.txt', { headers: { 'E2B-Traffic-Access-Token': 'wrong' } });
    return { ok: res.status === 401, status: res.status };
  });

  await step('kill', async () => {
    await a.kill();
    await b.kill();
    const res = await request(a.getHost(PORT), '/hello.txt');
    return { ok: res.status === 502, status: res.status, body: JSON.parse(res.body.toString()) };
  });
}

finish();
