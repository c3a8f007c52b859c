"""The hostile suite's process and file classes, from inside a JavaScript, a Bash and an R kernel
(issue 23): every language's kernel runs under the isolation and limits of the Python one.

From inside each language's own process (its own primitives: Node's fs/process/child_process,
bash's redirections and kill, R's writeLines/pskill/system2/parallel), the attacks try to see
and kill the host's and a neighbour's processes, write outside the sandbox (/usr, /etc,
/opt/cellbox, the host's own paths), read another sandbox's workspace and the host's files,
escalate (setuid, ptrace, mount, unshare, nsenter), fork past the pids limit and fill memory
past the memory limit. Each attack must fail, AND the host and a neighbour sandbox must be
untouched (Sandboxes.assert_contained: host files and mounts as they were, the daemon healthy,
the neighbour's state and files intact).

Every language kernel proves it is sandboxed (own namespaces, seccomp, no capabilities,
non-root) with its own process before it is sent any attack; a failed proof stops the run.
The attacks print one `@@R@@ <key> <outcome>` line each, read by `outcomes()`.
"""
import json
import os
import shlex

import pytest

from helpers.daemon import Daemon, finish_or_fail
from helpers.languages import BASH, JAVASCRIPT, R, missing_runtime
from seclib import PROOF_MARK, PWN, Cell, Sandboxes, all_gone, processes_of, proof_problems, read_proof, \
    wait_until

pytestmark = pytest.mark.cellbox_only

MARK = "@@R@@"
PIDS_LIMIT = 48
MEMORY_LIMIT = "256M"
CELL_TIMEOUT = 90

LANGS = [pytest.param(lang, id=lang.name,
                      marks=pytest.mark.skipif(missing_runtime(lang) is not None,
                                               reason=str(missing_runtime(lang))))
         for lang in (JAVASCRIPT, BASH, R)]


# ------------------------------------------------------------------ each language's attacks

JS_PROOF = """{
  const fs = require('fs');
  const st = {};
  for (const line of fs.readFileSync('/proc/self/status', 'utf8').split('\\n')) {
    const i = line.indexOf(':');
    if (i > 0) st[line.slice(0, i)] = line.slice(i + 1).trim();
  }
  console.log('%s' + JSON.stringify({
    mnt: fs.readlinkSync('/proc/self/ns/mnt'), pidns: fs.readlinkSync('/proc/self/ns/pid'),
    net: fs.readlinkSync('/proc/self/ns/net'), uid: process.getuid(), euid: process.geteuid(),
    gid: process.getgid(), seccomp: st.Seccomp, nnp: st.NoNewPrivs, capeff: st.CapEff,
    capprm: st.CapPrm, capbnd: st.CapBnd, capamb: st.CapAmb, pid: process.pid, cwd: process.cwd()}));
}""" % PROOF_MARK

BASH_PROOF = r"""__field() { sed -n "s/^$1:[[:space:]]*//p" /proc/$$/status | awk '{print $1}'; }
printf '%s{"mnt":"%%s","pidns":"%%s","net":"%%s","uid":%%s,"euid":%%s,"gid":%%s,"seccomp":"%%s","nnp":"%%s","capeff":"%%s","capprm":"%%s","capbnd":"%%s","capamb":"%%s","pid":%%s,"cwd":"%%s"}\n' \
  "$(readlink /proc/$$/ns/mnt)" "$(readlink /proc/$$/ns/pid)" "$(readlink /proc/$$/ns/net)" \
  "$(awk '/^Uid:/{print $2}' /proc/$$/status)" "$(awk '/^Uid:/{print $3}' /proc/$$/status)" \
  "$(awk '/^Gid:/{print $2}' /proc/$$/status)" "$(__field Seccomp)" "$(__field NoNewPrivs)" \
  "$(__field CapEff)" "$(__field CapPrm)" "$(__field CapBnd)" "$(__field CapAmb)" "$$" "$PWD"
unset -f __field""" % PROOF_MARK

R_PROOF = r"""local({
  st <- readLines('/proc/self/status')
  field <- function(k) strsplit(sub('^[^:]*:\\s*', '', grep(paste0('^', k, ':'), st, value = TRUE)[1]), '\\s+')[[1]]
  p <- list(mnt = Sys.readlink('/proc/self/ns/mnt'), pidns = Sys.readlink('/proc/self/ns/pid'),
            net = Sys.readlink('/proc/self/ns/net'), uid = as.integer(field('Uid')[1]),
            euid = as.integer(field('Uid')[2]), gid = as.integer(field('Gid')[1]),
            seccomp = field('Seccomp')[1], nnp = field('NoNewPrivs')[1], capeff = field('CapEff')[1],
            capprm = field('CapPrm')[1], capbnd = field('CapBnd')[1], capamb = field('CapAmb')[1],
            pid = Sys.getpid(), cwd = getwd())
  cat('%s', jsonlite::toJSON(p, auto_unbox = TRUE), '\n', sep = '')
})""" % PROOF_MARK


def js_list(items):
    return json.dumps([str(i) for i in items])


def r_vector(items):
    return "c(" + ", ".join(json.dumps(str(i)) for i in items) + ")"


ATTACKS = {
    "javascript": {
        "proof": JS_PROOF,
        "write": lambda paths: f"""for (const p of {js_list(paths)}) {{
  let r; try {{ require('fs').appendFileSync(p, 'pwned'); r = 'ok'; }} catch (e) {{ r = e.code || 'error'; }}
  console.log('{MARK} ' + p + ' ' + r);
}}""",
        "read": lambda paths: f"""for (const p of {js_list(paths)}) {{
  let r; try {{ require('fs').readFileSync(p); r = 'ok'; }} catch (e) {{ r = e.code || 'error'; }}
  console.log('{MARK} ' + p + ' ' + r);
}}""",
        "kill": lambda pids: f"""for (const pid of {js_list(pids)}) {{
  let r; try {{ process.kill(Number(pid), 'SIGKILL'); r = 'sent'; }} catch (e) {{ r = e.code || 'error'; }}
  console.log('{MARK} ' + pid + ' ' + r);
}}""",
        "shell": lambda cmds: f"""{{ const cp = require('child_process');
  {js_list(cmds)}.forEach((c, i) => console.log('{MARK} ' + i + ' ' +
    cp.spawnSync('/bin/sh', ['-c', c], {{ stdio: 'ignore', timeout: 20000 }}).status));
  for (const [name, call] of [['setuid', () => process.setuid(0)], ['setgid', () => process.setgid(0)],
                              ['seteuid', () => process.seteuid(0)]]) {{
    let r; try {{ call(); r = 'ok'; }} catch (e) {{ r = e.code || 'error'; }}
    console.log('{MARK} ' + name + ' ' + r);
  }}
}}""",
        "processes": f"""console.log('{MARK} visible ' + require('fs').readdirSync('/proc').filter(n => /^\\d+$/.test(n))
  .map(n => {{ try {{ return require('fs').readFileSync('/proc/' + n + '/cmdline', 'utf8').split('\\0')[0] || '-'; }} catch (e) {{ return '-'; }} }})
  .map(c => c.replace(/ /g, '_')).join(','))""",
        "forks": lambda n: f"""{{ const cp = require('child_process'); let made = 0, refused = 0;
  for (let i = 0; i < {n}; i++) {{
    const c = cp.spawn('/bin/sleep', ['60'], {{ stdio: 'ignore' }});
    c.on('error', () => {{}});
    if (c.pid === undefined) refused++; else made++;
  }}
  console.log('{MARK} made ' + made); console.log('{MARK} refused ' + refused);
}}""",
        "memory": f"""{{ const keep = [];
  for (let i = 0; i < 64; i++) keep.push(Buffer.alloc(32 << 20, 1));
  console.log('{MARK} survived ' + keep.length);
}}""",
        "kill_all": "process.kill(-1, 'SIGKILL')",
    },
    "bash": {
        "proof": BASH_PROOF,
        "write": lambda paths: "\n".join(
            f"if (echo pwned >> {shlex.quote(p)}) 2>/dev/null; then echo '{MARK} {p} ok'; "
            f"else echo '{MARK} {p} error'; fi" for p in paths),
        "read": lambda paths: "\n".join(
            f"if cat {shlex.quote(p)} >/dev/null 2>&1; then echo '{MARK} {p} ok'; "
            f"else echo '{MARK} {p} error'; fi" for p in paths),
        "kill": lambda pids: "\n".join(
            f"if kill -9 {pid} 2>/dev/null; then echo '{MARK} {pid} sent'; else echo '{MARK} {pid} error'; fi"
            for pid in pids),
        "shell": lambda cmds: "\n".join(
            f"/bin/sh -c {shlex.quote(c)} </dev/null >/dev/null 2>&1; echo \"{MARK} {i} $?\""
            for i, c in enumerate(cmds)),
        "processes": f"""v=; for d in /proc/[0-9]*; do c=$(tr '\\0' '\\n' < $d/cmdline 2>/dev/null | head -1)
c=${{c// /_}}; v="$v,${{c:--}}"; done
echo "{MARK} visible ${{v#,}}" """,
        # dash, not bash: bash retries a refused fork for 15 s each time, dash gives up at once
        "forks": lambda n: f"""/bin/sh -c 'i=0; while [ $i -lt {n} ]; do /bin/sleep 60 & i=$((i+1)); done' 2>/dev/null
echo "{MARK} status $?"
echo "{MARK} made $(ls -d /proc/[0-9]* | wc -l)" """,
        "memory": f"""x=$(head -c 1200M /dev/zero | tr '\\0' a)
echo "{MARK} survived ${{#x}}" """,
        "kill_all": "kill -9 -1",
    },
    "r": {
        "proof": R_PROOF,
        "write": lambda paths: f"""for (p in {r_vector(paths)}) {{
  r <- tryCatch({{ suppressWarnings(cat('pwned', file = p, append = TRUE)); 'ok' }}, error = function(e) 'error')
  cat('{MARK}', p, r, '\\n')
}}""",
        "read": lambda paths: f"""for (p in {r_vector(paths)}) {{
  r <- tryCatch({{ suppressWarnings(readBin(p, 'raw', 16)); 'ok' }}, error = function(e) 'error')
  cat('{MARK}', p, r, '\\n')
}}""",
        "kill": lambda pids: f"""for (pid in {r_vector(pids)}) {{
  cat('{MARK}', pid, if (isTRUE(tools::pskill(as.integer(pid), tools::SIGKILL))) 'sent' else 'error', '\\n')
}}""",
        "shell": lambda cmds: f"""local({{ cmds <- {r_vector(cmds)}
  for (i in seq_along(cmds)) cat('{MARK}', i - 1,
    suppressWarnings(system2('/bin/sh', c('-c', shQuote(cmds[i])), stdout = FALSE, stderr = FALSE, timeout = 20)), '\\n')
}})""",
        "processes": f"""local({{ ids <- grep('^[0-9]+$', list.files('/proc'), value = TRUE)
  cmd <- vapply(ids, function(n) tryCatch({{ x <- readBin(file.path('/proc', n, 'cmdline'), 'raw', 4096)
    if (length(x) == 0) '-' else gsub(' ', '_', rawToChar(x[seq_len(max(1, which(x == 0)[1] - 1))]))
  }}, error = function(e) '-'), '')
  cat('{MARK} visible', paste(cmd, collapse = ','), '\\n')
}})""",
        "forks": lambda n: f"""local({{ made <- 0; refused <- 0
  for (i in seq_len({n})) {{
    ok <- tryCatch({{ parallel::mcparallel(Sys.sleep(60)); TRUE }}, error = function(e) FALSE)
    if (ok) made <- made + 1 else refused <- refused + 1
  }}
  cat('{MARK} made', made, '\\n'); cat('{MARK} refused', refused, '\\n')
}})""",
        "memory": f"""keep <- lapply(1:64, function(i) rep(i, 4e6))
cat('{MARK} survived', length(keep), '\\n')""",
        # tools::pskill takes no -1: kill(1)'s does, run by R
        "kill_all": "system2('/bin/kill', c('-9', '-1'))",
    },
}

# Escalation: each must exit non-zero (124 is `timeout`'s: an attach that hung, i.e. succeeded).
ESCALATIONS = [
    "unshare -Ur id -u",
    "unshare -m true",
    "unshare -n true",
    "nsenter -t 1 -m true",
    "mount -t tmpfs none /tmp",
    "setpriv --reuid=0 --regid=0 --clear-groups true",
    "su -c true root",
    "timeout 5 strace -o /dev/null -p 1",
    "timeout 5 gdb -batch -p 1",
    "chroot / true",
]


def outcomes(cell):
    """{key: outcome} from the cell's `@@R@@ key outcome` lines."""
    found = {}
    for line in cell.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == MARK:
            found[parts[1]] = " ".join(parts[2:])
    return found


# ------------------------------------------------------------------ kernels

class LanguageKernel:
    """A kernel of one language in a module's daemon, WebSocket open, proven sandboxed."""

    def __init__(self, box, lang, limits=None):
        self.box = box
        self.lang = lang
        body = {"name": lang.kernelspec}
        if limits:
            body["limits"] = limits
        r = box.client.post("api/kernels", json=body)
        assert r.status_code == 201, f"POST /api/kernels {body} -> {r.status_code} {r.text}"
        self.id = r.json()["id"]
        self.ws = box.client.ready_ws(self.id)
        self.proof = None
        self.prove()

    def attack(self, name, *args):
        code = ATTACKS[self.lang.name][name]
        return code(*args) if args else code

    def prove(self):
        cell = self.run(self.attack("proof"))
        proof = read_proof(cell.stdout)
        problems = proof_problems(proof)
        if problems:
            pytest.exit(f"SANDBOX NOT IN EFFECT for the {self.lang.name} kernel {self.id}: "
                        f"{'; '.join(problems)} -- no hostile code was run. {cell.describe()}", returncode=3)
        self.proof = proof

    def run(self, code, timeout=CELL_TIMEOUT):
        return Cell(code, self.ws.collect(self.ws.send_execute(code), timeout=timeout, until_reply=False))

    def results(self, name, *args):
        cell = self.run(self.attack(name, *args))
        assert cell.final_state == "idle", cell.describe()
        return outcomes(cell)

    def host_processes(self):
        return processes_of(self.proof["pidns"])

    def delete(self):
        self.ws.close()
        return self.box.client.delete(f"api/kernels/{self.id}")


@pytest.fixture(scope="module")
def lang_box():
    """The module's daemon, its host baseline and a Python neighbour with state and a file
    (seclib.Sandboxes); one daemon for every language, started the default way."""
    d = Daemon(env={"HOST_SECRET_CANARY": "host-secret-languages"}).start()
    box = Sandboxes(d, "host-secret-languages")
    try:
        box.start_neighbour()
        yield box
    finally:
        box.cleanup()
        finish_or_fail(d)


@pytest.fixture(scope="module")
def lang_kernels(lang_box):
    made = {}

    def kernel_of(lang):
        if lang.name not in made:
            made[lang.name] = LanguageKernel(lang_box, lang)
        return made[lang.name]

    yield kernel_of
    for k in made.values():
        k.delete()


@pytest.fixture
def own_kernel(lang_box):
    """Factory of kernels for one test (with limits); deleted after it, and their processes gone."""
    made = []

    def make(lang, limits=None):
        made.append(LanguageKernel(lang_box, lang, limits))
        return made[-1]

    yield make
    processes = {}
    for k in made:
        if lang_box.client.get(f"api/kernels/{k.id}").status_code == 200:
            processes.update(k.host_processes())
        k.delete()
    wait_until(lambda: all_gone(processes), timeout=30,
               message="every process of the test's deleted sandboxes gone from the host")


# ------------------------------------------------------------------ processes

@pytest.mark.parametrize("lang", LANGS)
def test_sees_only_its_own_processes(lang_box, lang_kernels, lang):
    k = lang_kernels(lang)
    visible = outcomes(k.run(k.attack("processes")))["visible"].split(",")
    assert len(visible) <= 16, visible  # the supervisor, the kernel's few processes
    for foreign in ("cellboxd", "pytest", "python3 -m pytest", "cellbox-init --zygote"):
        assert not any(foreign in c for c in visible), visible
    lang_box.assert_contained()


@pytest.mark.parametrize("lang", LANGS)
def test_cannot_kill_the_daemon_or_the_neighbour(lang_box, lang_kernels, lang):
    k = lang_kernels(lang)
    neighbour = lang_box.neighbour
    pids = [lang_box.daemon.pid, neighbour.kernel_host_pid(), neighbour.supervisor_host_pid(), os.getpid()]
    assert all(pids), pids
    got = k.results("kill", pids)
    assert set(got) == {str(p) for p in pids}, got
    assert all(outcome != "sent" for outcome in got.values()), got
    assert lang_box.daemon.alive() and all(os.path.exists(f"/proc/{p}") for p in pids)
    lang_box.assert_contained()


@pytest.mark.parametrize("lang", LANGS)
def test_kill_everything_visible_reaches_only_its_sandbox(lang_box, own_kernel, lang):
    k = own_kernel(lang)
    cell = k.run(k.attack("kill_all"))
    assert cell.final_state == "dead", cell.describe()
    assert cell.ename == "KernelDied", cell.describe()
    lang_box.assert_contained()


# ------------------------------------------------------------------ files

@pytest.mark.parametrize("lang", LANGS)
def test_cannot_write_outside_the_sandbox(lang_box, lang_kernels, lang):
    k = lang_kernels(lang)
    box = lang_box
    outside = [f"/usr/{PWN}", f"/usr/bin/{PWN}", f"/etc/{PWN}", f"/opt/cellbox/{PWN}",
               "/opt/cellbox/bin/cellbox-kernel", "/etc/passwd", f"{box.host.outside}/{PWN}",
               f"{box.daemon.workspace(box.neighbour.id)}/{PWN}", "/proc/sys/kernel/hostname",
               f"/sys/fs/cgroup/{PWN}"]
    got = k.results("write", outside + [f"/workspace/{PWN}-allowed"])
    assert got[f"/workspace/{PWN}-allowed"] == "ok", got  # the attack's own means work
    written = {p: o for p, o in got.items() if o == "ok" and p in outside}
    assert not written, f"written outside the sandbox: {written}"
    assert set(outside) <= set(got), got
    assert not [n for n in os.listdir(box.host.outside) if PWN in n]
    assert not [n for n in os.listdir(box.daemon.workspace(box.neighbour.id)) if PWN in n]
    box.assert_contained()


@pytest.mark.parametrize("lang", LANGS)
def test_cannot_read_the_host_or_the_neighbours_workspace(lang_box, lang_kernels, lang):
    k = lang_kernels(lang)
    box = lang_box
    secret = [box.host.canary_path, os.path.join(box.daemon.workspace(box.neighbour.id), "neighbour.txt"),
              "/etc/shadow", f"/proc/{box.daemon.pid}/environ", f"{box.daemon.data_dir}/../cellboxd.log",
              "/root/.bashrc"]
    got = k.results("read", secret + ["/usr/bin/env"])
    assert got["/usr/bin/env"] == "ok", got  # the attack's own means work
    leaked = {p: o for p, o in got.items() if o == "ok" and p in secret}
    assert not leaked, f"read from outside the sandbox: {leaked}"
    box.assert_contained()


# ------------------------------------------------------------------ privileges

@pytest.mark.parametrize("lang", LANGS)
def test_cannot_escalate(lang_box, lang_kernels, lang):
    k = lang_kernels(lang)
    got = k.results("shell", ESCALATIONS)
    for i, cmd in enumerate(ESCALATIONS):
        assert got.get(str(i)) not in (None, "0", "124"), f"{cmd!r} -> {got.get(str(i))} ({got})"
    for name in ("setuid", "setgid", "seteuid"):
        if name in got:  # JavaScript's own calls
            assert got[name] != "ok", got
    # still the sandbox user, no capability gained
    k.prove()
    assert k.proof["uid"] != 0 and int(k.proof["capeff"], 16) == 0
    lang_box.assert_contained()


# ------------------------------------------------------------------ limits

@pytest.mark.parametrize("lang", LANGS)
def test_fork_bomb_stops_at_the_pids_limit(lang_box, own_kernel, lang):
    k = own_kernel(lang, limits={"pids": PIDS_LIMIT})
    cell = k.run(k.attack("forks", 4 * PIDS_LIMIT), timeout=CELL_TIMEOUT)
    got = outcomes(cell)
    in_sandbox = len(k.host_processes())
    assert in_sandbox <= PIDS_LIMIT, f"{in_sandbox} processes in a sandbox limited to {PIDS_LIMIT}"
    if "refused" in got:
        assert int(got["refused"]) > 0, got
    else:  # bash: dash gave up at the first refused fork
        assert got.get("status") not in (None, "0"), (got, cell.describe())
    lang_box.assert_contained()


@pytest.mark.parametrize("lang", LANGS)
def test_filling_memory_stops_at_the_memory_limit(lang_box, own_kernel, lang):
    k = own_kernel(lang, limits={"memory": MEMORY_LIMIT})
    cell = k.run(k.attack("memory"), timeout=CELL_TIMEOUT)
    assert "survived" not in outcomes(cell), cell.describe()  # 2 GiB never fitted in 256 MiB
    assert cell.final_state == "dead" or cell.error is not None, cell.describe()
    if cell.final_state == "dead":
        assert cell.ename == "KernelDied", cell.describe()
    lang_box.assert_contained()
