// A stand-in for src/runtime/node/kernel.js, for tests/kernel/test_language_host.py: it speaks
// the frame protocol (requests read on fd 3, its frames written on fd 4 and each acknowledged
// there with one byte before it goes on, blocking, as the real kernel does) and does just enough
// to test cellbox-kernel's relay. Cells: "exit N" exits with N, "kill" dies of
// SIGKILL, "garbage" writes a frame that is not JSON, anything else is echoed on stdout.
'use strict';
const fs = require('fs');
const crypto = require('crypto');

const session = crypto.randomUUID();
let counter = 0;

function send(channel, msgType, parent, content) {
  const frame = Buffer.from(JSON.stringify({
    channel,
    header: {msg_id: `${session}_${process.pid}_${counter++}`, session, username: 'kernel',
             date: new Date().toISOString(), msg_type: msgType, version: '5.3'},
    parent_header: parent ? parent.header : {}, metadata: {}, content}));
  const length = Buffer.alloc(4);
  length.writeUInt32LE(frame.length);
  fs.writeSync(4, Buffer.concat([length, frame]));
  if (fs.readSync(4, Buffer.alloc(1), 0, 1, null) !== 1) process.exit(0); // cellbox-kernel is gone
}

function readExactly(size) {
  const buffer = Buffer.alloc(size);
  let got = 0;
  while (got < size) {
    const n = fs.readSync(3, buffer, got, size - got, null);
    if (n === 0) process.exit(0);
    got += n;
  }
  return buffer;
}

send('iopub', 'status', null, {execution_state: 'starting'});
for (;;) {
  const request = JSON.parse(readExactly(readExactly(4).readUInt32LE(0)).toString());
  if (request.channel === 'cellbox') {
    fs.writeSync(1, `cellbox frame: ${JSON.stringify(request)}\n`);
    continue;
  }
  const type = request.header.msg_type;
  send('iopub', 'status', request, {execution_state: 'busy'});
  if (type === 'kernel_info_request') {
    send(request.channel, 'kernel_info_reply', request,
         {status: 'ok', implementation: 'stand-in', language_info: {name: 'javascript'}});
  } else if (type === 'execute_request') {
    const code = request.content.code;
    if (code.startsWith('exit ')) process.exit(Number(code.slice(5)));
    if (code === 'kill') process.kill(process.pid, 'SIGKILL');
    if (code === 'garbage') {
      fs.writeSync(4, Buffer.from([5, 0, 0, 0, 110, 111, 116, 32, 106]));
    } else {
      fs.writeSync(1, code + '\n');
      send('shell', 'execute_reply', request, {status: 'ok', execution_count: 1});
    }
  }
  send('iopub', 'status', request, {execution_state: 'idle'});
}
