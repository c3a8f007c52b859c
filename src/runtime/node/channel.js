'use strict';
// channel — the frames of docs/kernel-protocol.md on fd 3, as Node's kernel speaks them to
// cellbox-kernel (language_host.c), which relays them to and from the daemon unchanged.
//
// A frame is a 4-byte little-endian length and that many bytes of UTF-8 JSON: one Jupyter
// message plus the channel it travels on. Frames are written in the order they are made; output
// written to fd 1/2 before a frame is already in the pipe (Node writes pipes synchronously), and
// cellbox-kernel drains the pipes before it relays the frame, so the daemon publishes them in
// that order.

const crypto = require('crypto');
const net = require('net');

const PROTOCOL_VERSION = '5.3';
const USERNAME = 'kernel';
const MAX_FRAME = 64 << 20; // the protocol's limit, both ways

// Header ids as jupyter_client 7 makes them (<session>_<pid>_<counter>), dates with
// microseconds as ipykernel writes them.
const session = crypto.randomUUID();
const idPrefix = `${session}_${process.pid}_`;
let messageCount = 0;

function timestamp() {
  const micros = Math.floor((performance.timeOrigin + performance.now()) * 1000);
  const iso = new Date(Math.floor(micros / 1000)).toISOString(); // ...SS.mmmZ
  return `${iso.slice(0, 19)}.${String(micros % 1000000).padStart(6, '0')}Z`;
}

function header(msgType) {
  return {
    msg_id: idPrefix + messageCount++,
    session,
    username: USERNAME,
    date: timestamp(),
    msg_type: msgType,
    version: PROTOCOL_VERSION,
  };
}

// One frame's object; `parent` is the request (or null: `status: starting`).
function message(channel, msgType, content, parent, metadata) {
  return {
    channel,
    header: header(msgType),
    parent_header: parent ? parent.header : {},
    metadata: metadata || {},
    content,
  };
}

// Opens fd `fd` and calls onFrame(object) for each whole frame, onClose() at its end (the
// daemon, or cellbox-kernel, is gone: nobody is left to serve).
function open(fd, onFrame, onClose) {
  const socket = new net.Socket({ fd, readable: true, writable: true });
  let pending = Buffer.alloc(0);
  socket.on('data', (chunk) => {
    pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
    while (pending.length >= 4) {
      const length = pending.readUInt32LE(0);
      if (length > MAX_FRAME) {
        process.stderr.write(`cellbox node kernel: a ${length}-byte frame on fd ${fd} is over the 64 MiB limit; exiting\n`);
        process.exit(1);
      }
      if (pending.length < 4 + length) break;
      const body = pending.subarray(4, 4 + length).toString('utf8');
      pending = pending.subarray(4 + length);
      let frame;
      try {
        frame = JSON.parse(body);
      } catch (error) {
        process.stderr.write(`cellbox node kernel: ignoring a frame that is not JSON: ${error.message}\n`);
        continue;
      }
      if (frame && typeof frame === 'object' && !Array.isArray(frame)) onFrame(frame);
    }
  });
  socket.on('end', onClose);
  socket.on('error', onClose);

  function send(frame, done) {
    const body = Buffer.from(JSON.stringify(frame), 'utf8');
    const length = Buffer.alloc(4);
    length.writeUInt32LE(body.length, 0);
    socket.write(Buffer.concat([length, body]), done);
  }
  return { send, socket };
}

module.exports = { open, message, timestamp, session, PROTOCOL_VERSION };
