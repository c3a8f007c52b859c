"""Processes that join a running sandbox through the native API — shell commands and extra
contexts — and the files API, attacked from inside.

A command or a context is started by the daemon entering the sandbox's namespaces (setns) and then
taking the same steps as the sandbox's own program. Each test asserts the attack failed, then
`box.assert_contained()`: host unchanged, daemon healthy, neighbour untouched.
"""
import json
import os

from seclib import all_gone, processes_of, wait_until

IDENTITY = ("import json, os\n"
            "st = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)\n"
            "print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), "
            "'seccomp': st['Seccomp'].strip(), 'nnp': st['NoNewPrivs'].strip(), "
            "'capeff': st['CapEff'].strip(), 'capbnd': st['CapBnd'].strip(), "
            "'pidns': os.readlink('/proc/self/ns/pid'), 'mnt': os.readlink('/proc/self/ns/mnt'), "
            "'net': os.readlink('/proc/self/ns/net'), 'cgroup': open('/proc/self/cgroup').read(), "
            "'procs': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), "
            "'fds': sorted(int(f) for f in os.listdir('/proc/self/fd')), "
            "'environ': open('/proc/self/environ', 'rb').read().decode(errors='replace')}))")


def command(box, kernel, cmd, **body):
    """Runs a foreground command; returns (exit event, stdout, stderr)."""
    r = box.client.post(f"v1/sandboxes/{kernel.id}/commands", json={"cmd": cmd, **body},
                        stream=True, timeout=120)
    assert r.status_code == 200, f"{cmd!r} -> {r.status_code} {r.text}"
    out, err, end = [], [], None
    for line in r.iter_lines():
        event = json.loads(line)
        if event["type"] == "stdout":
            out.append(event["text"])
        elif event["type"] == "stderr":
            err.append(event["text"])
        elif event["type"] == "exit":
            end = event
    assert end is not None, f"{cmd!r}: the stream ended without an exit event"
    return end, "".join(out), "".join(err)


def identity_of_command(box, kernel):
    end, out, err = command(box, kernel, f"/usr/bin/python3 -c \"{IDENTITY}\"")
    assert end["exit_code"] == 0, err
    return json.loads(out)


def test_a_command_is_as_confined_as_the_kernel(box, hostile):
    me = identity_of_command(box, hostile)
    proof = hostile.proof
    assert (me["uid"], me["gid"]) == (proof["uid"], proof["gid"]) and me["uid"] >= 1000
    assert me["seccomp"] == "2" and me["nnp"] == "1"
    assert int(me["capeff"], 16) == 0 and int(me["capbnd"], 16) == 0
    # the sandbox's own namespaces, not the host's
    assert (me["pidns"], me["mnt"], me["net"]) == (proof["pidns"], proof["mnt"], proof["net"])
    assert me["cgroup"].strip().endswith(":/"), me["cgroup"]  # its cgroup namespace's root
    # it sees only the sandbox's processes, and has only its three standard descriptors
    assert max(me["procs"]) < 1000 and 1 in me["procs"], me["procs"]
    assert me["fds"] == [0, 1, 2, 3], me["fds"]  # 3: the listing's own directory
    assert box.secret not in me["environ"] and box.daemon.token not in me["environ"]
    box.assert_contained()


def test_a_command_cannot_read_the_daemon_token_or_secret(box, hostile):
    end, out, err = command(box, hostile, "cat /proc/*/cmdline /proc/*/environ 2>/dev/null | tr '\\0' ' '")
    assert box.daemon.token not in out and box.secret not in out
    box.assert_contained()


def test_a_command_cannot_make_namespaces_or_mount(box, hostile):
    end, out, err = command(box, hostile, "unshare -U -r true; echo unshare=$?; "
                                          "mount -t tmpfs x /tmp 2>&1; echo mount=$?")
    assert "unshare=0" not in out and "mount=0" not in out, out + err
    box.assert_contained()


def test_a_command_is_held_to_the_sandbox_memory_limit(box, fresh):
    k = fresh(limits={"memory": "96M"})
    end, out, err = command(box, k, "/usr/bin/python3 -c 'b = bytearray(400 << 20); print(len(b))'")
    assert end["exit_code"] != 0 and str(400 << 20) not in out, (end, out, err)
    box.assert_contained()


def test_a_fork_bomb_in_a_command_is_stopped_by_the_pids_limit(box, fresh):
    k = fresh(limits={"pids": 32})
    end, out, err = command(box, k, "for i in $(seq 200); do sleep 30 & done; echo started",
                            timeout_s=20)
    assert end["exit_code"] in (0, 2, 124, 128 + 9) or "fork" in err.lower(), (end, out, err)
    alive = box.client.post(f"v1/sandboxes/{k.id}/execute", json={"code": "print('alive')"}, timeout=120)
    assert alive.status_code == 200
    box.assert_contained()


def test_commands_and_contexts_die_with_their_sandbox(box, fresh):
    k = fresh()
    r = box.client.post(f"v1/sandboxes/{k.id}/commands", json={"cmd": "sleep 600", "background": True})
    assert r.status_code == 201, r.text
    command_pid = r.json()["pid"]  # as the sandbox sees it
    r = box.client.post(f"v1/sandboxes/{k.id}/contexts", json={})
    assert r.status_code == 201, r.text
    context = r.json()["id"]
    r = box.client.post(f"v1/sandboxes/{k.id}/execute", json={"code": "import os; print(os.getpid())",
                                                              "context_id": context}, timeout=120)
    assert r.status_code == 200 and '"stdout"' in r.text, r.text
    namespace = k.proof["pidns"]
    # the command and the second context live in the sandbox's pid namespace
    assert command_pid in k.host_pids(), (command_pid, k.host_pids())
    processes = processes_of(namespace)
    assert len(processes) >= 4  # pid 1, the kernel, sleep, the context
    assert box.client.delete(f"v1/sandboxes/{k.id}").status_code == 204
    wait_until(lambda: all_gone(processes), timeout=30,
               message="every process of the deleted sandbox gone")
    box.assert_contained()


def test_files_api_never_follows_a_planted_symlink_out(box, hostile):
    with open("/etc/hostname") as f:
        host_hostname = f.read()
    hostile.ok("import os\n"
               "for name, target in [('l_abs', '/etc/hostname'), ('l_up', '../../../../etc/hostname'),"
               " ('l_magic', '/proc/1/root/etc/hostname'), ('l_self', '/proc/self/root/etc/passwd')]:\n"
               "    try: os.remove(name)\n"
               "    except FileNotFoundError: pass\n"
               "    os.symlink(target, name)\n")
    for name in ("l_abs", "l_up"):
        r = box.client.get(f"v1/sandboxes/{hostile.id}/files", params={"path": name})
        # resolved inside the sandbox: its own /etc/hostname, never the host's file
        assert r.status_code in (200, 404), r.text
        if r.status_code == 200:
            assert r.content.decode().strip() == "cellbox" and r.content.decode() != host_hostname
    for name in ("l_magic", "l_self"):
        r = box.client.get(f"v1/sandboxes/{hostile.id}/files", params={"path": name})
        assert r.status_code in (400, 403, 404), f"{name}: {r.status_code} {r.text[:200]}"
        assert b"root:" not in r.content
    for path in ("../../../etc/passwd", "/workspace/../../etc/shadow", "/proc/1/environ",
                 "/proc/self/root/etc/shadow", "/dev/mem", "/sys/kernel/notes"):
        r = box.client.get(f"v1/sandboxes/{hostile.id}/files", params={"path": path})
        assert r.status_code in (400, 403, 404), f"{path}: {r.status_code} {r.text[:200]}"
        assert box.secret.encode() not in r.content
    box.assert_contained()


def test_files_api_writes_as_the_sandbox_user_only_where_it_may(box, hostile):
    r = box.client.request("PUT", f"v1/sandboxes/{hostile.id}/files", params={"path": "/etc/passwd"},
                           data=b"root::0:0::/:/bin/sh\n")
    assert r.status_code in (403, 409), r.text
    r = box.client.request("PUT", f"v1/sandboxes/{hostile.id}/files", params={"path": "/usr/bin/evil"},
                           data=b"#!/bin/sh\n")
    assert r.status_code == 403, r.text
    r = box.client.request("PUT", f"v1/sandboxes/{hostile.id}/files", params={"path": "owned.txt"},
                           data=b"mine")
    assert r.status_code in (200, 201), r.text
    st = os.stat(os.path.join(hostile.workspace, "owned.txt"))
    assert st.st_uid == hostile.proof["uid"], "a file the API wrote must belong to the sandbox user"
    box.assert_contained()


def test_a_fifo_does_not_stall_the_daemon(box, hostile):
    hostile.ok("import os\nif not os.path.exists('pipe'): os.mkfifo('pipe')\n")
    r = box.client.get(f"v1/sandboxes/{hostile.id}/files", params={"path": "pipe"}, timeout=20)
    assert r.status_code in (400, 403), r.text
    box.assert_contained()


def test_files_api_survives_a_symlink_swapping_race(box, hostile, tmp_path):
    """A process in the sandbox swaps a directory and a symlink to a host path as fast as it can
    while the files API reads and writes through that name: no answer may ever carry the host
    file's content, and nothing may appear on the host."""
    canary_dir = tmp_path / "canary"
    canary_dir.mkdir()
    secret = "race-canary-" + os.urandom(6).hex()
    (canary_dir / "secret.txt").write_text(secret)
    swapper = ("cd /workspace && mkdir -p real && echo inside > real/secret.txt && "
               f"while :; do ln -sfn {canary_dir} race.tmp && mv -T race.tmp race; "
               "rm -f race; cp -r real race 2>/dev/null; rm -rf race; done")
    r = box.client.post(f"v1/sandboxes/{hostile.id}/commands",
                        json={"cmd": swapper, "background": True, "timeout_s": 60})
    assert r.status_code == 201, r.text
    command_id = r.json()["id"]
    try:
        seen = set()
        for i in range(300):
            got = box.client.get(f"v1/sandboxes/{hostile.id}/files", params={"path": "race/secret.txt"})
            seen.add(got.status_code)
            assert secret.encode() not in got.content, "a host file was read through a swapped symlink"
            put = box.client.request("PUT", f"v1/sandboxes/{hostile.id}/files",
                                     params={"path": f"race/planted-{i}.txt"}, data=b"x")
            assert put.status_code in (200, 201, 400, 403, 404, 409), put.text
        assert not [p for p in canary_dir.iterdir() if p.name != "secret.txt"], \
            "a file was written on the host through a swapped symlink"
        assert seen <= {200, 400, 403, 404, 409}, seen
    finally:
        box.client.delete(f"v1/sandboxes/{hostile.id}/commands/{command_id}")
    box.assert_contained()
