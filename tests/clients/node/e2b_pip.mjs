// E2B's walkthrough step "install packages at runtime" with E2B's official SDK, unchanged, against
// cellboxd (environment as for e2b_client.mjs, plus CELLBOX_WHEEL: the path of a wheel built by
// the pytest side, tests/clients/test_e2b_pip.py):
//
//   pip install by name in a sandbox without a network, through commands.run (E2B's
//   `bash -l -c`) and runCode's `!pip`: it fails, and its last line is cellbox's saying why;
//   the wheel uploaded with files.write, installed with runCode's %pip and imported by the
//   same kernel; installed again with commands.run and its console script run by name.
//
// Prints one JSON summary line, {"ok", "steps"}, exits 0 when every step passed, 1 otherwise, 2
// on a hang (global deadline).
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { CommandExitError, Sandbox } from '@e2b/code-interpreter';

import { scenario } from './scenario.mjs';

const { step, finish } = scenario('e2b_pip.mjs', { requires: ['CELLBOX_WHEEL'] });

const wheelPath = process.env.CELLBOX_WHEEL;
const wheel = basename(wheelPath);
const module = wheel.split('-')[0];
const command = module.replaceAll('_', '-');
const lastLine = (text) => text.split('\n').filter(line => line.trim()).at(-1) ?? '';

// commands.run, its outcome whether it exits 0 or throws CommandExitError.
async function runCommand(sandbox, cmd) {
  try {
    const result = await sandbox.commands.run(cmd, { timeoutMs: 120_000 });
    return { exit_code: result.exitCode, stdout: result.stdout, stderr: result.stderr };
  } catch (err) {
    if (err instanceof CommandExitError)
      return { exit_code: err.exitCode, stdout: err.stdout, stderr: err.stderr, command_exit_error: true };
    throw err;
  }
}

let sandbox;
await step('create', async () => {
  sandbox = await Sandbox.create({ timeoutMs: 120_000 });
  return { ok: !!sandbox.sandboxId };
});

if (sandbox) {
  await step('commands_pip_without_network', async () => {
    const outcome = await runCommand(sandbox, 'pip install cowsay');
    return { ...outcome, last_line: lastLine(outcome.stderr), ok: outcome.command_exit_error === true };
  });

  await step('run_code_pip_without_network', async () => {
    const execution = await sandbox.runCode('!pip install cowsay', { timeoutMs: 120_000 });
    const output = execution.logs.stdout.join('') + execution.logs.stderr.join('');
    return { last_line: lastLine(output), error: execution.error?.name ?? null, ok: !execution.error };
  });

  await step('upload_wheel', async () => {
    const info = await sandbox.files.write(wheel, readFileSync(wheelPath));
    return { path: info.path, ok: info.path.endsWith(`/${wheel}`) };
  });

  await step('run_code_pip_wheel_and_import', async () => {
    const execution = await sandbox.runCode(
      `%pip install --no-index ./${wheel}\nimport ${module}\n${module}.GREETING`, { timeoutMs: 120_000 });
    const output = execution.logs.stdout.join('');
    return { text: execution.text, error: execution.error ? `${execution.error.name}: ${execution.error.value}` : null,
             installed: output.includes('Successfully installed'), ok: !execution.error };
  });

  await step('commands_pip_wheel_and_script', async () => {
    const install = await runCommand(sandbox, `pip install --no-index --force-reinstall ./${wheel}`);
    const script = await runCommand(sandbox, command);
    return { install_exit_code: install.exit_code, script, ok: install.exit_code === 0 };
  });

  await step('kill', async () => ({ ok: await sandbox.kill() !== false }));
}

finish();
