// What every E2B SDK scenario script here shares: it checks that it was pointed at cellboxd
// (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY), runs named steps (a throw fails the step with the
// error's class and message, not the scenario), and prints one JSON summary line,
// {"ok", "steps": {name: {ok, ...}}}, exiting 0 when every step passed, 1 otherwise and 2 when
// the global deadline (CELLBOX_CLIENT_DEADLINE_MS) passed first, so nothing hangs a test.
// tests/helpers/node_clients.py runs a script and reads that line. Below scenario(), the small
// helpers several scripts use: failure(), sleep() and until().

import { webcrypto } from 'node:crypto';

// E2B's SDK signs file URLs with the global Web Crypto (crypto.subtle), which Node has only from
// version 19 on; Debian 12's nodejs is 18, so give it the same object Node 19+ has there.
if (!globalThis.crypto) globalThis.crypto = webcrypto;

// Exits 64 with a usage line unless the environment points the SDK at cellboxd (and holds each
// of `requires`); e2b_bench.mjs, which prints figures rather than steps, calls it alone.
export function checkEnvironment(scriptName, requires = []) {
  const needed = ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY', ...requires];
  for (const name of needed) {
    if (!process.env[name]) {
      console.error(`usage: ${needed.map(n => `${n}=...`).join(' ')} node ${scriptName} (${name} is missing)`);
      process.exit(64);
    }
  }
}

// `requires` names further environment variables the script cannot run without; `deadlineMs`
// is the global deadline when CELLBOX_CLIENT_DEADLINE_MS does not set one.
export function scenario(scriptName, { requires = [], deadlineMs: defaultDeadlineMs = 150000 } = {}) {
  checkEnvironment(scriptName, requires);
  const deadlineMs = Number(process.env.CELLBOX_CLIENT_DEADLINE_MS || defaultDeadlineMs);
  const steps = {};
  const report = (name, ok, detail) => {
    steps[name] = { ok: !!ok, ...(detail || {}) };
    process.stderr.write(`${ok ? 'ok  ' : 'FAIL'} ${name}\n`);
  };
  const summary = () => ({ ok: Object.values(steps).every(s => s.ok), steps });
  const hang = setTimeout(() => {
    report('deadline', false, { message: `no completion within ${deadlineMs} ms` });
    process.stdout.write(JSON.stringify(summary()) + '\n');
    process.exit(2);
  }, deadlineMs);
  return {
    steps,
    report,
    async step(name, body) {
      try {
        const detail = await body();
        report(name, detail.ok ?? true, detail);
      } catch (err) {
        report(name, false, { error: `${err?.name}: ${err?.message}` });
      }
    },
    finish() {
      clearTimeout(hang);
      process.stdout.write(JSON.stringify(summary()) + '\n');
      process.exit(summary().ok ? 0 : 1);
    },
  };
}

// What a call threw, as data: {name, message} and whatever `describe(err)` adds (null when it did
// not throw), so a step can report an SDK error class it expects.
export async function failure(call, describe = () => ({})) {
  try {
    await call();
    return null;
  } catch (err) {
    return { name: err?.name ?? String(err), message: String(err?.message ?? err), ...describe(err) };
  }
}

export const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

// Waits until `ready()` holds, at most `tries` rounds 50 ms apart (output and events arrive on
// their own); returns whether it did.
export async function until(ready, tries = 200) {
  for (let i = 0; i < tries && !ready(); i++)
    await sleep(50);
  return ready();
}
