// The E2B walkthrough users start from (shared/seeds 002: quick start, upload a file, install a
// package, analyse data with a chart), through E2B's official SDK unchanged, pointed at cellboxd:
//
//   E2B_API_URL=http://127.0.0.1:8888 E2B_SANDBOX_URL=http://127.0.0.1:8888 \
//   E2B_API_KEY=<cellbox token> node e2b_walkthrough.mjs
//
// Steps: Sandbox.create, runCode keeps state, files.write to /home/user/upload.txt read back by
// runCode, commands.run("pip install cowsay") (a sandbox has no network yet: the SDK's
// CommandExitError, whose output says so), a CSV uploaded and analysed with pandas, its
// matplotlib bar chart coming back as a PNG and as result.chart, then kill. Prints one JSON
// summary line, {"ok", "steps": {name: {ok, ...}}}; exits 0 when every step passed, 1 otherwise,
// 2 on a hang (global deadline). tests/clients/test_e2b_walkthrough.py checks the details.
import { Sandbox } from '@e2b/code-interpreter';

import { scenario } from './scenario.mjs';

const { step, finish } = scenario('e2b_walkthrough.mjs');

const CSV = 'city,population\nParis,2148000\nBerlin,3645000\nMadrid,3223000\nRome,2873000\n';
let sbx;
await step('create', async () => {
  sbx = await Sandbox.create({ timeoutMs: 120_000 });
  return { ok: !!sbx.sandboxId };
});

if (sbx) {
  await step('run_code', async () => {
    await sbx.runCode('x = 41');
    const execution = await sbx.runCode('x + 1');
    return { text: execution.text, ok: execution.text === '42' };
  });

  await step('upload', async () => {
    const info = await sbx.files.write('/home/user/upload.txt', 'hello from the walkthrough\n');
    const execution = await sbx.runCode("print(open('/home/user/upload.txt').read(), end='')");
    const stdout = execution.logs.stdout.join('');
    return { path: info.path, stdout, ok: stdout === 'hello from the walkthrough\n' };
  });

  await step('pip_install', async () => {
    try {
      const result = await sbx.commands.run('pip install cowsay', { timeoutMs: 60_000 });
      return { ok: false, exit_code: result.exitCode, message: 'pip install succeeded without a network' };
    } catch (err) {
      return { name: err?.name, exit_code: err?.exitCode ?? null, stdout: err?.stdout ?? '',
               stderr: err?.stderr ?? '', ok: err?.name === 'CommandExitError' };
    }
  });

  await step('analyse_csv', async () => {
    await sbx.files.write('data.csv', CSV); // relative: /home/user, runCode's working directory
    const execution = await sbx.runCode(
      'import pandas as pd\nimport matplotlib.pyplot as plt\n' +
      "df = pd.read_csv('data.csv')\n" +
      "plt.bar(df['city'], df['population'])\nplt.title('Population')\n" +
      "plt.xlabel('city')\nplt.ylabel('people')\nplt.show()\n" +
      "df['population'].mean()");
    const figure = execution.results.find(r => r.png);
    const chart = figure?.chart;
    return {
      error: execution.error ? `${execution.error.name}: ${execution.error.value}` : null,
      text: execution.text,
      png_bytes: figure ? Buffer.from(figure.png, 'base64').length : 0,
      chart_type: chart?.type ?? null, chart_title: chart?.title ?? null,
      chart_labels: (chart?.elements || []).map(e => e.label),
      chart_values: (chart?.elements || []).map(e => e.value),
      ok: !execution.error && !!figure && chart?.type === 'bar',
    };
  });

  await step('kill', async () => {
    await sbx.kill();
    return { running: await sbx.isRunning(), ok: !(await sbx.isRunning()) };
  });
}

finish();
