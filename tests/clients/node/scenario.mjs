// What every E2B SDK scenario script here shares: it checks that it was pointed at cellboxd
// (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY), runs named steps (a throw fails the step with the
// error's class and message, not the scenario), and prints one JSON summary line,
// {"ok", "steps": {name: {ok, ...}}}, exiting 0 when every step passed, 1 otherwise and 2 when
// the global deadline (CELLBOX_CLIENT_DEADLINE_MS) passed first, so nothing hangs a test.
// tests/helpers/node_clients.py runs a script and reads that line.

export function scenario(scriptName) {
  for (const name of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
    if (!process.env[name]) {
      console.error(`usage: E2B_API_URL=... E2B_SANDBOX_URL=... E2B_API_KEY=... node ${scriptName} (${name} is missing)`);
      process.exit(64);
    }
  }
  const deadlineMs = Number(process.env.CELLBOX_CLIENT_DEADLINE_MS || 150000);
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
