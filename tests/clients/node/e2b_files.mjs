// envd's files through E2B's official SDK (`e2b`), unchanged, pointed at cellboxd by the
// environment alone (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY), against a daemon whose
// sandboxes have a small disk (the pytest side starts it with --disk-limit 64M):
//
//   a 40 MiB file written as a stream (application/octet-stream) and as a form, read back and
//   its hash compared; several files in one form; a write past the disk limit
//   (NotEnoughSpaceError, no partial file left); gzip both ways; signed upload and download
//   URLs fetched with plain fetch() and no token (valid, without expiry, a wrong signature,
//   expired, and a URL without signature); another sandbox's signature.
//
// Prints one JSON summary line, {"ok", "steps": {name: {ok, ...}}}, and exits 0 when every
// step passed, 1 otherwise, 2 on a hang (global deadline). tests/clients/test_e2b_files.py
// checks each step's details again.
import { createHash, randomBytes } from 'node:crypto';
import { Sandbox } from 'e2b';

import { failure, scenario } from './scenario.mjs';

const { step, finish } = scenario('e2b_files.mjs');


const MiB = 1024 * 1024;
const sha256 = bytes => createHash('sha256').update(bytes).digest('hex');

// A ReadableStream of `bytes` in 1 MiB pieces: the SDK uploads streams as they are read.
function streamOf(bytes) {
  let offset = 0;
  return new ReadableStream({
    pull(controller) {
      if (offset >= bytes.length) return controller.close();
      controller.enqueue(bytes.subarray(offset, offset + MiB));
      offset += MiB;
    },
  });
}

// What a plain fetch() of a URL answers: status and body (JSON when it is).
async function fetched(url, init) {
  const res = await fetch(url, init);
  const text = await res.text();
  let body = text;
  try { body = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, body };
}

let sandbox, other;
await step('create', async () => {
  sandbox = await Sandbox.create({ timeoutMs: 120_000 });
  other = await Sandbox.create({ timeoutMs: 120_000 });
  return { sandbox_id: sandbox.sandboxId, token_differs: sandbox.envdAccessToken !== other.envdAccessToken,
           has_token: !!sandbox.envdAccessToken,
           ok: !!sandbox.sandboxId && !!sandbox.envdAccessToken && sandbox.envdAccessToken !== other.envdAccessToken };
});

if (sandbox) {
  const big = randomBytes(40 * MiB);

  await step('big_stream', async () => {
    const written = await sandbox.files.write('big.bin', streamOf(big));
    const back = await sandbox.files.read('big.bin', { format: 'bytes' });
    const info = await sandbox.files.getInfo('big.bin');
    return { written, size: info.size, same_hash: sha256(back) === sha256(big),
             ok: sha256(back) === sha256(big) && info.size === big.length };
  });

  await step('big_form', async () => {
    const reversed = Buffer.from(big).reverse();
    const written = await sandbox.files.write('big.bin', new Blob([reversed]));
    const back = await sandbox.files.read('big.bin', { format: 'bytes' });
    return { written, same_hash: sha256(back) === sha256(reversed), ok: sha256(back) === sha256(reversed) };
  });
  await sandbox.files.remove('big.bin').catch(() => {});

  await step('multipart', async () => {
    const binary = randomBytes(3 * MiB + 17);
    const written = await sandbox.files.write([
      { path: 'many/a.txt', data: 'alpha' },
      { path: 'many/deeper/b.bin', data: new Blob([binary]) },
      { path: 'many/empty.txt', data: '' },
    ]);
    const a = await sandbox.files.read('many/a.txt');
    const b = await sandbox.files.read('many/deeper/b.bin', { format: 'bytes' });
    const empty = await sandbox.files.read('many/empty.txt');
    return { written, a, b_same: sha256(b) === sha256(binary), empty_length: empty.length,
             ok: written.length === 3 && a === 'alpha' && sha256(b) === sha256(binary) && empty === '' };
  });

  await step('disk_full', async () => {
    const tooBig = new Uint8Array(80 * MiB);
    const form = await failure(() => sandbox.files.write('full-form.bin', new Blob([tooBig])));
    const stream = await failure(() => sandbox.files.write('full-stream.bin', streamOf(tooBig)));
    const left = [await sandbox.files.exists('full-form.bin'), await sandbox.files.exists('full-stream.bin')];
    const after = await sandbox.files.write('after.txt', 'still writable');
    return { form, stream, left, after_path: after.path,
             ok: form?.name === 'NotEnoughSpaceError' && stream?.name === 'NotEnoughSpaceError' &&
                 !left[0] && !left[1] && !!after.path };
  });

  await step('gzip', async () => {
    const text = 'a line that compresses well\n'.repeat(200_000);
    const written = await sandbox.files.write('gz/text.txt', text, { gzip: true });
    const plain = await sandbox.files.read('gz/text.txt');
    const zipped = await sandbox.files.read('gz/text.txt', { gzip: true });
    const bytes = randomBytes(2 * MiB);
    await sandbox.files.write('gz/random.bin', new Blob([bytes]), { gzip: true });
    const bytesBack = await sandbox.files.read('gz/random.bin', { format: 'bytes', gzip: true });
    return { written, plain_same: plain === text, zipped_same: zipped === text,
             bytes_same: sha256(bytesBack) === sha256(bytes),
             ok: plain === text && zipped === text && sha256(bytesBack) === sha256(bytes) };
  });

  await step('signed_urls', async () => {
    await sandbox.files.write('signed/hello.txt', 'hello world');
    const download = await sandbox.downloadUrl('signed/hello.txt', { useSignatureExpiration: 60 });
    const valid = await fetched(download);
    const forever = await fetched(await sandbox.downloadUrl('signed/hello.txt'));
    const upload = await sandbox.uploadUrl('signed/up.txt', { useSignatureExpiration: 60 });
    const form = new FormData();
    form.append('file', 'uploaded without a token');
    const uploaded = await fetched(upload, { method: 'POST', body: form });
    const readBack = await sandbox.files.read('signed/up.txt');
    const wrongUrl = new URL(download);
    wrongUrl.searchParams.set('signature', 'v1_' + 'A'.repeat(43));
    const wrong = await fetched(wrongUrl);
    const otherPath = new URL(download);
    otherPath.searchParams.set('path', 'signed/up.txt'); // a signature is for one path
    const moved = await fetched(otherPath);
    const expired = await fetched(await sandbox.downloadUrl('signed/hello.txt', { useSignatureExpiration: -10 }));
    const expiredForm = new FormData();
    expiredForm.append('file', 'must not land');
    const expiredUpload = await fetched(await sandbox.uploadUrl('signed/late.txt', { useSignatureExpiration: -10 }),
                                        { method: 'POST', body: expiredForm });
    const late = await sandbox.files.exists('signed/late.txt');
    const unsigned = new URL(download);
    unsigned.searchParams.delete('signature');
    unsigned.searchParams.delete('signature_expiration');
    const bare = await fetched(unsigned);
    // the other sandbox's signature for the same path reaches the other sandbox only
    const theirs = await fetched(await other.downloadUrl('signed/hello.txt', { useSignatureExpiration: 60 }));
    return { valid, forever, uploaded, read_back: readBack, wrong, moved, expired, expired_upload: expiredUpload,
             late_exists: late, bare_status: bare.status, theirs_status: theirs.status,
             ok: valid.status === 200 && valid.body === 'hello world' && forever.status === 200 &&
                 uploaded.status === 200 && readBack === 'uploaded without a token' &&
                 wrong.status === 401 && moved.status === 401 && expired.status === 401 &&
                 expiredUpload.status === 401 && !late && bare.status === 401 && theirs.status === 404 };
  });

  await step('kill', async () => {
    const killed = await sandbox.kill();
    const killedOther = await other.kill();
    return { ok: killed === true && killedOther === true };
  });
}

finish();
