// E2B's code interpreter SDK (@e2b/code-interpreter), unchanged, reading `result.chart` from
// cellboxd: the structured chart the kernel extracts from each matplotlib figure a cell shows.
//
//   E2B_API_URL=http://127.0.0.1:8888 E2B_SANDBOX_URL=http://127.0.0.1:8888 \
//   E2B_API_KEY=<cellbox token> node e2b_charts.mjs
//
// One runCode per chart kind (line, dates on an axis, scatter, bar, pie, box plot, subplots as a
// superchart), the chart reaching an onResult callback, and a cell without a figure (no chart).
// Each step reports the chart's fields as the SDK gives them. Prints one JSON summary line,
// {"ok", "steps": {name: {ok, ...}}}, and exits 0 when every step passed, 1 otherwise, 2 on a
// hang (global deadline). tests/clients/test_e2b_charts.py checks each step's values.
import { Sandbox } from '@e2b/code-interpreter';

import { scenario } from './scenario.mjs';

const { step, finish } = scenario('e2b_charts.mjs');


// Runs a cell that shows one figure; the step's detail is what the SDK's Result holds.
async function chartStep(name, kind, code) {
  await step(name, async () => {
    const execution = await sandbox.runCode('import matplotlib.pyplot as plt\n' + code + '\nplt.show()');
    const shown = execution.results.filter(r => r.png);
    const result = shown[0];
    return {
      figures: shown.length,
      error: execution.error ? `${execution.error.name}: ${execution.error.value}` : null,
      formats: result?.formats() ?? [],
      extra: result?.extra ?? null,
      chart: result?.chart ?? null,
      ok: shown.length === 1 && !execution.error && result.chart?.type === kind,
    };
  });
}

let sandbox;
await step('create', async () => {
  sandbox = await Sandbox.create({ timeoutMs: 120_000 });
  return { sandbox_id: sandbox.sandboxId, ok: !!sandbox.sandboxId };
});

if (sandbox) {
  await chartStep('line', 'line', `
plt.plot([1, 2, 3], [4, 5, 6], label="speed")
plt.plot([1, 2, 3], [1, 1, 2])
plt.title("Runs"); plt.xlabel("Time (s)"); plt.ylabel("Distance [km]")`);

  await chartStep('dates', 'line', `
import datetime
plt.plot([datetime.date(2024, 3, d) for d in (1, 2, 3)], [10, 20, 15], label="visits")`);

  await chartStep('scatter', 'scatter', `
plt.scatter([1, 2, 3], [3, 1, 2], label="a")
plt.title("Dots"); plt.xlabel("x"); plt.ylabel("y")`);

  await chartStep('bar', 'bar', `
plt.bar(["Author A", "Author B", "Author C"], [100, 200, 300], label="Books Sold")
plt.title("Book Sales"); plt.xlabel("Authors"); plt.ylabel("Number of Books Sold")`);

  await chartStep('pie', 'pie', `
fig, ax = plt.subplots()
ax.pie([90, 10], labels=["No", "No, in blue"], startangle=90)
ax.set_title("Will I wake up early?")`);

  await chartStep('box', 'box_and_whisker', `
data = {"A": [85, 90, 78, 92, 88], "B": [95, 89, 76, 91, 84, 87, 40]}
fig, ax = plt.subplots()
ax.boxplot(list(data.values()), labels=list(data.keys()), patch_artist=True)
ax.set_title("Scores"); ax.set_xlabel("Class"); ax.set_ylabel("Score")`);

  await chartStep('superchart', 'superchart', `
fig, axs = plt.subplots(1, 2)
fig.suptitle("Two views")
axs[0].plot([0, 1, 2], [0, 1, 4]); axs[0].set_title("Line")
axs[1].bar(["x", "y"], [2, 3]); axs[1].set_title("Bars")`);

  await step('on_result', async () => {
    const seen = [];
    await sandbox.runCode('import matplotlib.pyplot as plt\nplt.bar(["a"], [1])\nplt.show()',
      { onResult: result => { seen.push(result.chart?.type ?? null); } });
    return { seen, ok: seen.length === 1 && seen[0] === 'bar' };
  });

  await step('no_figure', async () => {
    const execution = await sandbox.runCode('6 * 7');
    const result = execution.results[0];
    return { text: execution.text, chart: result?.chart ?? null, formats: result?.formats() ?? [],
             ok: execution.text === '42' && result?.chart === undefined };
  });

  await step('kill', async () => ({ killed: await sandbox.kill() }));
}

finish();
