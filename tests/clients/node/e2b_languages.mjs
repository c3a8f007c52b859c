// E2B's official SDK (@e2b/code-interpreter), unchanged, running other languages than Python in
// cellboxd (issue 23): runCode(code, {language}) with each name E2B gives a language ('js',
// 'javascript', 'ts', 'typescript', 'bash', 'r'), its results (text, html, png), errors (name,
// traceback), createCodeContext({language}) keeping state, and onStdout in order. Pointed at
// the daemon by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY; prints one JSON summary line
// (scenario.mjs). Each step reports what it saw; tests/clients/test_e2b_languages.py checks it.
// CELLBOX_LANGUAGES (comma-separated: js, ts, bash, r) leaves out what the host cannot run.
import { Sandbox } from '@e2b/code-interpreter';

import { scenario } from './scenario.mjs';

const { step, finish } = scenario('e2b_languages.mjs', { deadlineMs: 200000 });
const wanted = new Set((process.env.CELLBOX_LANGUAGES || 'js,ts,bash,r').split(','));
const PNG_1x1 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNgAAAAAgABVKJPXQAAAABJRU5ErkJggg==';
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

const isPng = base64 => !!base64 && Buffer.from(base64, 'base64').subarray(0, 8).equals(PNG_SIGNATURE);

// What an execution came to, as data the Python side can check.
function seen(execution) {
  return {
    text: execution.text ?? null,
    texts: execution.results.map(r => r.text ?? null),
    stdout: execution.logs.stdout.join(''),
    stderr: execution.logs.stderr.join(''),
    html: execution.results.filter(r => r.html).map(r => r.html),
    png: execution.results.some(r => isPng(r.png)),
    error: execution.error ? { name: execution.error.name, value: execution.error.value,
                               traceback: execution.error.traceback } : null,
  };
}

let sandbox;
await step('create', async () => {
  sandbox = await Sandbox.create({ timeoutMs: 180_000 });
  return { sandbox_id: sandbox.sandboxId, ok: !!sandbox.sandboxId };
});

if (sandbox) {
  if (wanted.has('js')) {
    for (const language of ['js', 'javascript']) {
      await step(`value_${language}`, async () => seen(await sandbox.runCode('6 * 7', { language })));
    }
    await step('state_js', async () => {
      await sandbox.runCode('let kept = 41;', { language: 'js' });
      return seen(await sandbox.runCode('kept + 1', { language: 'javascript' }));
    });
    await step('rich_js', async () => seen(await sandbox.runCode(
      `display.html('<b>bold</b>');\ndisplay.png('${PNG_1x1}');\n'done'`, { language: 'js' })));
    await step('error_js', async () => seen(await sandbox.runCode(
      "function fail() { throw new RangeError('out of range'); }\nfail()", { language: 'js' })));
    await step('stdout_order_js', async () => {
      const lines = [];
      const execution = await sandbox.runCode(
        "for (let i = 0; i < 3; i++) console.log('line ' + i);\n'end'",
        { language: 'js', onStdout: message => lines.push(message.line) });
      return { lines, ...seen(execution) };
    });
    await step('context_js', async () => {
      const context = await sandbox.createCodeContext({ language: 'js' });
      await sandbox.runCode('const inContext = "only here";', { context });
      const there = await sandbox.runCode('inContext', { context });
      const elsewhere = await sandbox.runCode('typeof inContext', { language: 'js' });
      return { language: context.language, there: seen(there), elsewhere: seen(elsewhere) };
    });
  }
  if (wanted.has('ts')) {
    for (const language of ['ts', 'typescript']) {
      await step(`value_${language}`, async () => seen(await sandbox.runCode(
        'const six: number = 6;\nsix * 7', { language })));
    }
    await step('error_ts', async () => seen(await sandbox.runCode(
      "function fail(why: string): never { throw new TypeError(why); }\nfail('typed boom')",
      { language: 'ts' })));
  }
  if (wanted.has('bash')) {
    await step('value_bash', async () => seen(await sandbox.runCode('echo $(( 6 * 7 ))', { language: 'bash' })));
    await step('state_bash', async () => {
      await sandbox.runCode('kept=41; cd /tmp', { language: 'bash' });
      return seen(await sandbox.runCode('echo $((kept + 1)) $PWD', { language: 'bash' }));
    });
    await step('error_bash', async () => seen(await sandbox.runCode('echo before; false', { language: 'bash' })));
    await step('stdout_order_bash', async () => {
      const lines = [];
      const execution = await sandbox.runCode('for i in 0 1 2; do echo line $i; done',
        { language: 'bash', onStdout: message => lines.push(message.line) });
      return { lines, ...seen(execution) };
    });
    await step('context_bash', async () => {
      const context = await sandbox.createCodeContext({ language: 'bash' });
      await sandbox.runCode('only_here=yes', { context });
      const there = await sandbox.runCode('echo ${only_here:-unset}', { context });
      const elsewhere = await sandbox.runCode('echo ${only_here:-unset}', { language: 'bash' });
      return { language: context.language, there: seen(there), elsewhere: seen(elsewhere) };
    });
  }
  if (wanted.has('r')) {
    await step('value_r', async () => seen(await sandbox.runCode('6 * 7', { language: 'r' })));
    await step('rich_r', async () => {
      const frame = seen(await sandbox.runCode("data.frame(a = 1:2, b = c('x', 'y'))", { language: 'r' }));
      const plot = seen(await sandbox.runCode('plot(1:10)', { language: 'r' }));
      return { frame, plot };
    });
    await step('error_r', async () => seen(await sandbox.runCode("stop('r says no')", { language: 'r' })));
  }
  await step('kill', async () => ({ killed: await sandbox.kill() ?? true }));
}
finish();
