// A networked sandbox and its egress lists through E2B's official SDK, unchanged, against
// cellboxd started with --allow-network (environment as for e2b_client.mjs, plus the test
// internet's addresses from tests/clients/test_e2b_network.py: CELLBOX_WEB (the web server),
// CELLBOX_INDEX (the package index's host), CELLBOX_PROJECT and CELLBOX_PACKAGE (its wheel)):
//
//   create with network {allowOut: [index], denyOut: ['0.0.0.0/0']}: the index answers, the web
//   server does not; getInfo reads the lists back; the seed walkthrough's commands.run('pip
//   install ...') from the index, then runCode imports it; updateNetwork flips the lists, and
//   {} clears them; allowInternetAccess: false alone gives no network (and updateNetwork is
//   refused), beside lists it denies all but allowOut; updateNetwork({allowInternetAccess:
//   false}) shuts a running sandbox off; allowOut by domain name (web.test, then pkg.test after
//   updateNetwork) with denyOut ['0.0.0.0/0'] reaches only that name's host.
//
// Prints one JSON summary line, {"ok", "steps"}, exits 0 when every step passed, 1 otherwise, 2
// on a hang (global deadline).
import { Sandbox } from '@e2b/code-interpreter';

import { scenario } from './scenario.mjs';

const { step, finish } = scenario('e2b_network.mjs', {
  requires: ['CELLBOX_WEB', 'CELLBOX_INDEX', 'CELLBOX_PROJECT', 'CELLBOX_PACKAGE'],
});

const web = process.env.CELLBOX_WEB;
const index = process.env.CELLBOX_INDEX;
const project = process.env.CELLBOX_PROJECT;
const pkg = process.env.CELLBOX_PACKAGE;
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// Which of the two outside hosts the sandbox reaches now: an HTTP answer of any status counts.
// The firewall drops what it denies, so a denied host costs the whole timeout: both are tried at
// once, with a timeout long enough that a loaded machine's slow answer is not read as a refusal.
const reachCode = (webHost, indexHost) => `
import concurrent.futures, json, urllib.error, urllib.request
def _reach(host):
    try:
        urllib.request.urlopen(f'http://{host}/', timeout=10).read()
    except urllib.error.HTTPError:
        pass
    except Exception:
        return False
    return True
with concurrent.futures.ThreadPoolExecutor(2) as _pool:
    _web, _index = _pool.map(_reach, ('${webHost}', '${indexHost}'))
json.dumps({'web': _web, 'index': _index})`;

// By address, or by the names the test internet's DNS server gives them (web.test, pkg.test),
// which the sandbox resolves through its gateway's resolver.
async function reaches(sandbox, byName = false) {
  const code = byName ? reachCode('web.test', 'pkg.test') : reachCode(web, index);
  const execution = await sandbox.runCode(code, { timeoutMs: 60_000 });
  if (execution.error) throw new Error(`${execution.error.name}: ${execution.error.value}`);
  return JSON.parse(execution.text.slice(1, -1)); // the repr of a str: '{"web": true, ...}'
}

async function info(sandbox) {
  const i = await Sandbox.getInfo(sandbox.sandboxId);
  return { allowInternetAccess: i.allowInternetAccess ?? null, network: i.network ?? null };
}

const sandboxes = [];
async function create(opts) {
  const sandbox = await Sandbox.create({ timeoutMs: 180_000, ...opts });
  sandboxes.push(sandbox);
  return sandbox;
}

let listed;
await step('create_with_lists', async () => {
  listed = await create({ network: { allowOut: [index], denyOut: ['0.0.0.0/0'] } });
  const reached = await reaches(listed);
  return { reached, ok: reached.index && !reached.web };
});

if (listed) {
  await step('get_info', async () => {
    const got = await info(listed);
    return { ...got, ok: same(got.network?.allowOut, [index]) && same(got.network?.denyOut, ['0.0.0.0/0']) };
  });

  await step('commands_pip_install_then_import', async () => {
    const install = await listed.commands.run(
      `pip install --index-url http://${index}/simple --trusted-host ${index} ${project}`,
      { timeoutMs: 120_000 });
    const execution = await listed.runCode(`import ${pkg}\n${pkg}.GREETING`, { timeoutMs: 60_000 });
    return { exit_code: install.exitCode, last_line: install.stdout.trim().split('\n').at(-1),
             text: execution.text ?? null, error: execution.error?.value ?? null,
             ok: install.exitCode === 0 && !execution.error };
  });

  await step('update_network_flips', async () => {
    await listed.updateNetwork({ denyOut: [index] });
    const reached = await reaches(listed);
    const got = await info(listed);
    return { reached, ...got,
             ok: reached.web && !reached.index && same(got.network?.allowOut, []) &&
                 same(got.network?.denyOut, [index]) && got.allowInternetAccess === true };
  });

  await step('update_network_clears', async () => {
    await Sandbox.updateNetwork(listed.sandboxId, {});
    const reached = await reaches(listed);
    return { reached, ok: reached.web && reached.index };
  });

  await step('update_network_internet_off', async () => {
    await listed.updateNetwork({ allowOut: [web], allowInternetAccess: false });
    const reached = await reaches(listed);
    const got = await info(listed);
    return { reached, ...got,
             ok: reached.web && !reached.index && got.allowInternetAccess === false &&
                 same(got.network?.denyOut, ['0.0.0.0/0']) };
  });
}

await step('internet_false_alone_has_no_network', async () => {
  const sandbox = await create({ allowInternetAccess: false });
  const reached = await reaches(sandbox);
  const got = await info(sandbox);
  let refused = null;
  try {
    await sandbox.updateNetwork({ allowOut: [web] });
  } catch (err) {
    refused = `${err.name}: ${err.message}`;
  }
  return { reached, ...got, refused,
           ok: !reached.web && !reached.index && got.allowInternetAccess === false &&
               got.network === null && refused !== null };
});

await step('internet_false_with_lists_denies_the_rest', async () => {
  const sandbox = await create({ allowInternetAccess: false, network: { allowOut: [web] } });
  const reached = await reaches(sandbox);
  const got = await info(sandbox);
  return { reached, ...got,
           ok: reached.web && !reached.index && same(got.network?.denyOut, ['0.0.0.0/0']) };
});

await step('internet_true_reaches_both', async () => {
  const sandbox = await create({ allowInternetAccess: true });
  const reached = await reaches(sandbox);
  const got = await info(sandbox);
  return { reached, ...got, ok: reached.web && reached.index && got.allowInternetAccess === true };
});

// E2B's usual "only these domains" shape: allowOut a name, denyOut everything.
await step('domains_allow_out_then_update', async () => {
  const sandbox = await create({ network: { allowOut: ['web.test'], denyOut: ['0.0.0.0/0'] } });
  const before = await reaches(sandbox, true);
  await sandbox.updateNetwork({ allowOut: ['pkg.test'], denyOut: ['0.0.0.0/0'] });
  const after = await reaches(sandbox, true);
  const got = await info(sandbox);
  return { before, after, ...got,
           ok: before.web && !before.index && !after.web && after.index &&
               same(got.network?.allowOut, ['pkg.test']) };
});

await step('kill', async () => {
  const killed = await Promise.all(sandboxes.map(s => s.kill()));
  return { ok: killed.every(k => k !== false) };
});

finish();
