'use strict';
// channel — the frames of docs/kernel-protocol.md as Node's kernel speaks them to cellbox-kernel
// (language_host.c), which relays them to and from the daemon unchanged: requests come on fd 3,
// Node's own frames go out on fd 4.
//
// A frame is a 4-byte little-endian length and that many bytes of UTF-8 JSON: one Jupyter
// message plus the channel it travels on. The ordering rule (output written before a frame is
// published before it, output written after it after it) is kept by writing each frame
// synchronously on fd 4, a blocking socket libuv never opens, and then blocking until
// cellbox-kernel answers one byte on the same socket: it sends that byte once it has drained fd
// 1/2 and written the frame to the daemon. While Node waits it writes nothing, so the drain sees
// exactly the output written before the frame (an asynchronous socket.write could go out after
// output written later, and output written after the frame could be drained before it).

const crypto = require('crypto');
const fs = require('fs');
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

// Reads requests on fd `requestFd` and calls onFrame(object) for each whole frame, onClose() at
// its end (the daemon, or cellbox-kernel, is gone: nobody is left to serve). send(frame) writes
// a frame on `frameFd` and returns once cellbox-kernel has relayed it.
function open(requestFd, frameFd, onFrame, onClose) {
  const socket = new net.Socket({ fd: requestFd, readable: true, writable: false });
  let pending = Buffer.alloc(0);
  socket.on('data', (chunk) => {
    pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
    while (pending.length >= 4) {
      const length = pending.readUInt32LE(0);
      if (length > MAX_FRAME) {
        process.stderr.write(`cellbox node kernel: a ${length}-byte frame on fd ${requestFd} is over the 64 MiB limit; exiting\n`);
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

  const ack = Buffer.alloc(1);

  // fs.writeSync/readSync on a blocking fd: EINTR and EAGAIN (should someone make it
  // non-blocking) are retried, anything else means cellbox-kernel is gone.
  function retried(call) {
    for (;;) {
      try {
        return call();
      } catch (error) {
        if (error.code !== 'EINTR' && error.code !== 'EAGAIN') throw error;
      }
    }
  }

  function send(frame) {
    const body = Buffer.from(JSON.stringify(frame), 'utf8');
    const whole = Buffer.alloc(4 + body.length);
    whole.writeUInt32LE(body.length, 0);
    body.copy(whole, 4);
    try {
      for (let offset = 0; offset < whole.length;)
        offset += retried(() => fs.writeSync(frameFd, whole, offset, whole.length - offset));
      if (retried(() => fs.readSync(frameFd, ack, 0, 1, null)) !== 1) process.exit(0);
    } catch (error) {
      // cellbox-kernel is gone (EPIPE, ECONNRESET): nobody is left to serve.
      process.exit(0);
    }
  }
  return { send, socket };
}

module.exports = { open, message, timestamp, session, PROTOCOL_VERSION };
