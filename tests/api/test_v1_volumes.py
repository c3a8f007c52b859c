"""/v1/volumes: named volumes that outlive sandboxes, mount into several at once, have a size
limit, and go only when deleted (issue 20, part G).

Each test uses volumes of its own names; the daemon fixture's finish() fails the module if the
daemon leaves a mount behind, and test_nothing_left_after_the_daemon_stops checks loop devices.
"""
import contextlib
import os

import pytest

pytestmark = pytest.mark.cellbox_only

VOLUME_OWNER = 65533  # sandbox/volume_shared.h: the id every volume file has on disk


def create_volume(v1, name, **body):
    r = v1.post("v1/volumes", json={"name": name, **body})
    assert r.status_code == 201, f"POST /v1/volumes {name} -> {r.status_code} {r.text[:300]}"
    return r.json()


def delete_volume(v1, name, **params):
    return v1.delete(f"v1/volumes/{name}", params=params)


def sh(v1, sid, cmd):
    ev = v1.command(sid, cmd)
    return ev[-1]["exit_code"], ev.stdout, ev.stderr


def error_of(r):
    return r.json().get("message", "") if "json" in r.headers.get("Content-Type", "") else r.text


def test_create_list_get_delete(v1):
    model = create_volume(v1, "crud-one", size="64M")
    assert model["name"] == "crud-one" and model["size_bytes"] == 64 << 20, model
    assert model["sandboxes"] == [] and model["mounted"] is True, model
    assert 0 <= model["used_bytes"] < model["size_bytes"], model
    assert model["created_at"].endswith("Z"), model
    listed = v1.get("v1/volumes").json()
    assert "crud-one" in [v["name"] for v in listed], listed
    assert v1.get("v1/volumes/crud-one").json()["size_bytes"] == 64 << 20
    # the default size when none is given
    assert create_volume(v1, "crud-two")["size_bytes"] == 1 << 30
    assert delete_volume(v1, "crud-one").status_code == 204
    assert delete_volume(v1, "crud-two").status_code == 204
    r = v1.get("v1/volumes/crud-one")
    assert r.status_code == 404 and "crud-one does not exist" in error_of(r), r.text
    assert "crud-one" not in [v["name"] for v in v1.get("v1/volumes").json()]
    r = delete_volume(v1, "crud-one")
    assert r.status_code == 404, r.text


def test_refusals_name_the_problem(v1):
    for bad in ["", "-dash", "a/b", "..", "x.img", "x" * 64, "sp ace", "ünï"]:
        r = v1.post("v1/volumes", json={"name": bad})
        assert r.status_code == 400 and "invalid volume name" in error_of(r), (bad, r.text)
    r = v1.post("v1/volumes", json={})
    assert r.status_code == 400 and "'name' is required" in error_of(r), r.text
    for size in ["1k", "1T", "lots", -5]:
        r = v1.post("v1/volumes", json={"name": "sized", "size": size})
        assert r.status_code == 400 and "size" in error_of(r), (size, r.text)
    create_volume(v1, "twice", size="16M")
    r = v1.post("v1/volumes", json={"name": "twice"})
    assert r.status_code == 409 and "already exists" in error_of(r), r.text
    assert delete_volume(v1, "twice").status_code == 204


def test_mount_paths_are_checked(v1):
    create_volume(v1, "paths", size="16M")
    bad = ["relative", "/", "/proc", "/proc/x", "/etc/data", "/usr/local/x", "/workspace",
           "/workspace/data", "/home/user", "/home/user/data", "/opt/cellbox/x", "/dev/x",
           "/tmp/x", "/mnt/../etc", "/mnt/./x", "/mnt//x", "/mnt/x/", "/mnt/sp ace", "/sys"]
    for path in bad:
        r = v1.post("v1/sandboxes", json={"volumes": {"paths": path}})
        assert r.status_code == 400, (path, r.status_code, r.text)
        assert "paths" in error_of(r) and ("invalid mount path" in error_of(r)
                                           or "sandbox's own" in error_of(r)), (path, r.text)
    r = v1.post("v1/sandboxes", json={"volumes": {"no-such-volume": "/mnt/x"}})
    assert r.status_code == 404 and "no-such-volume does not exist" in error_of(r), r.text
    r = v1.post("v1/sandboxes", json={"volumes": ["paths"]})
    assert r.status_code == 400 and "'volumes' must be an object" in error_of(r), r.text
    # nothing was started for any of them
    assert all(s["volumes"] == {} for s in v1.sandboxes()), v1.sandboxes()
    assert v1.get("v1/volumes/paths").json()["sandboxes"] == []
    assert delete_volume(v1, "paths").status_code == 204


def test_two_sandboxes_share_files_both_ways(v1):
    create_volume(v1, "shared", size="64M")
    a = v1.create(timeout_s=0, volumes={"shared": "/mnt/shared"})
    b = v1.create(timeout_s=0, volumes={"shared": "/data/shared"})
    assert a["volumes"] == {"shared": "/mnt/shared"} and b["volumes"] == {"shared": "/data/shared"}
    assert sorted(v1.get("v1/volumes/shared").json()["sandboxes"]) == sorted([a["id"], b["id"]])
    # different users: each sandbox runs as its own uid
    uid_a = sh(v1, a["id"], "id -u")[1].strip()
    uid_b = sh(v1, b["id"], "id -u")[1].strip()
    assert uid_a != uid_b
    # a private mode (umask 077, chmod 600) does not keep the other sandbox out: in each
    # sandbox's view the volume's files are its own user's
    assert sh(v1, a["id"], "umask 077 && mkdir /mnt/shared/dir && echo from-a > /mnt/shared/dir/note "
                           "&& chmod 600 /mnt/shared/dir/note")[0] == 0
    code, out, err = sh(v1, b["id"], "cat /data/shared/dir/note && echo from-b >> /data/shared/dir/note "
                                     "&& echo b-file > /data/shared/dir/b && stat -c '%u %g %a' /data/shared/dir/note")
    assert code == 0, err
    assert out.splitlines() == ["from-a", f"{uid_b} {uid_b} 600"], out
    code, out, err = sh(v1, a["id"], "cat /mnt/shared/dir/note /mnt/shared/dir/b && rm /mnt/shared/dir/b "
                                     "&& stat -c '%u %a' /mnt/shared/dir/note /mnt/shared/dir")
    assert code == 0, err
    assert out.splitlines() == ["from-a", "from-b", "b-file", f"{uid_a} 600", f"{uid_a} 700"], out
    # the /v1 files API reaches the volume as the sandbox's processes see it
    r = v1.get(f"v1/sandboxes/{b['id']}/files", params={"path": "/data/shared/dir/note"})
    assert r.status_code == 200 and r.content == b"from-a\nfrom-b\n", r.text[:300]
    # on disk, on the host, every file has the one unprivileged owner, never a sandbox's uid
    image_root = os.path.join(v1.daemon.data_dir, "named-volumes", "volume-shared")
    st = os.stat(os.path.join(image_root, "dir", "note"))
    assert (st.st_uid, st.st_gid) == (VOLUME_OWNER, VOLUME_OWNER), st


def test_files_outlive_their_sandboxes(v1):
    create_volume(v1, "lasting", size="32M")
    first = v1.create(timeout_s=0, volumes={"lasting": "/mnt/v"})
    assert sh(v1, first["id"], "echo kept > /mnt/v/file")[0] == 0
    assert v1.remove(first["id"]).status_code == 204
    assert v1.get("v1/volumes/lasting").json()["sandboxes"] == []
    second = v1.create(timeout_s=0, volumes={"lasting": "/srv/other/place"})
    assert sh(v1, second["id"], "cat /srv/other/place/file")[1] == "kept\n"
    v1.remove(second["id"])
    assert delete_volume(v1, "lasting").status_code == 204


def test_delete_while_mounted_needs_force(v1):
    create_volume(v1, "busy", size="16M")
    s = v1.create(timeout_s=0, volumes={"busy": "/mnt/busy"})
    r = delete_volume(v1, "busy")
    assert r.status_code == 409, r.text
    assert s["id"] in error_of(r) and "force" in error_of(r), r.text
    assert v1.get("v1/volumes/busy").status_code == 200
    r = delete_volume(v1, "busy", force="true")
    assert r.status_code == 204, r.text
    assert v1.get("v1/volumes/busy").status_code == 404
    # the sandbox lives on, its view of the volume with it
    assert sh(v1, s["id"], "echo still > /mnt/busy/x && cat /mnt/busy/x")[1] == "still\n"
    v1.remove(s["id"])


def test_size_limit_is_enforced(v1):
    create_volume(v1, "small", size="16M")
    s = v1.create(timeout_s=0, volumes={"small": "/mnt/small"})
    code, out, err = sh(v1, s["id"], "dd if=/dev/zero of=/mnt/small/fill bs=1M count=64 2>&1; echo rc=$?")
    assert "No space left on device" in out and "rc=1" in out, out
    # the sandbox's own /workspace is untouched by the full volume
    assert sh(v1, s["id"], "echo fine > /workspace/ok && cat /workspace/ok")[1] == "fine\n"
    used = v1.get("v1/volumes/small").json()["used_bytes"]
    assert used > 8 << 20, used
    v1.remove(s["id"])
    assert delete_volume(v1, "small").status_code == 204


def test_paused_sandbox_keeps_its_mount(v1):
    create_volume(v1, "pausing", size="16M")
    s = v1.create(timeout_s=0, volumes={"pausing": "/mnt/p"})
    assert sh(v1, s["id"], "echo before > /mnt/p/f")[0] == 0
    assert v1.post(f"v1/sandboxes/{s['id']}/pause").status_code == 200
    assert v1.get("v1/volumes/pausing").json()["sandboxes"] == [s["id"]]
    assert v1.post(f"v1/sandboxes/{s['id']}/resume").status_code == 200
    assert sh(v1, s["id"], "cat /mnt/p/f && echo after >> /mnt/p/f && cat /mnt/p/f")[1] == "before\nbefore\nafter\n"
    v1.remove(s["id"])
    assert delete_volume(v1, "pausing").status_code == 204


def test_mount_is_nosuid_nodev_and_writable_under_landlock(v1):
    create_volume(v1, "flags", size="16M")
    s = v1.create(timeout_s=0, volumes={"flags": "/mnt/flags"})
    code, out, _ = sh(v1, s["id"], "grep ' /mnt/flags ' /proc/self/mountinfo")
    assert code == 0, out
    options = out.split()[5].split(",")
    assert "rw" in options and "nosuid" in options and "nodev" in options, out
    # a kernel (not only a command) writes there too: Landlock lets every process of the sandbox
    ev = v1.execute(s["id"], "open('/mnt/flags/k','w').write('kernel'); print(open('/mnt/flags/k').read())")
    assert ev.stdout == "kernel\n", ev
    v1.remove(s["id"])
    assert delete_volume(v1, "flags").status_code == 204


def loops_backed_by(root):
    found = []
    for name in os.listdir("/sys/block"):
        path = f"/sys/block/{name}/loop/backing_file"
        try:
            with open(path) as f:
                if f.read().strip().startswith(os.path.realpath(root)):
                    found.append(name)
        except OSError:
            pass
    return found


def test_volumes_survive_a_restart_and_nothing_is_left(make_daemon):
    from helpers.v1 import V1
    first = make_daemon()
    v1 = V1(first)
    create_volume(v1, "durable", size="16M")
    s = v1.create(timeout_s=0, volumes={"durable": "/mnt/d"})
    assert sh(v1, s["id"], "echo across > /mnt/d/f")[0] == 0
    v1.cleanup()
    first.stop()
    assert loops_backed_by(first.data_dir) == [], "a loop device outlived the daemon"
    second = make_daemon(start=False)
    second.data_dir = first.data_dir
    second.start()
    v2 = V1(second)
    assert [v["name"] for v in v2.get("v1/volumes").json()] == ["durable"]
    s = v2.create(timeout_s=0, volumes={"durable": "/mnt/d"})
    assert sh(v2, s["id"], "cat /mnt/d/f")[1] == "across\n"
    v2.cleanup()
    assert delete_volume(v2, "durable").status_code == 204
    assert not os.path.exists(os.path.join(first.data_dir, "named-volumes", "volume-durable.img"))
    second.stop()
    assert loops_backed_by(first.data_dir) == []


def test_a_restarted_kernel_gets_its_volume_again(v1, daemon):
    create_volume(v1, "restarting", size="16M")
    s = v1.create(timeout_s=0, volumes={"restarting": "/mnt/r"})
    v1.execute(s["id"], "open('/mnt/r/f', 'w').write('before the restart')")
    r = v1.client.post(f"api/kernels/{s['id']}/restart")
    assert r.status_code == 200, r.text
    ev = v1.execute(s["id"], "print(open('/mnt/r/f').read()); open('/mnt/r/g', 'w').write('after')")
    assert ev.stdout == "before the restart\n", ev
    v1.remove(s["id"])
    assert delete_volume(v1, "restarting").status_code == 204


def test_a_sandbox_left_running_over_a_daemon_restart_keeps_its_volume(make_daemon):
    import signal
    from helpers.v1 import V1
    first = make_daemon(args=["--keep-sandboxes"])
    with open(os.path.join(first.data_dir, "keeper.pid")) as f:
        keeper = int(f.read())
    v1 = V1(first)
    create_volume(v1, "adopted", size="16M")
    s = v1.create(timeout_s=0, volumes={"adopted": "/mnt/a"})
    assert sh(v1, s["id"], "echo one > /mnt/a/f")[0] == 0
    first.stopped_by_us = True
    os.kill(first.pid, signal.SIGTERM)
    assert first.proc.wait(timeout=30) == 0
    assert "leaving 1 sandbox(es) running" in first.log_text()
    second = make_daemon(start=False)
    second.data_dir = first.data_dir
    second.start()
    try:
        v2 = V1(second)
        assert v2.model(s["id"])["volumes"] == {"adopted": "/mnt/a"}
        # still in use: the adopted sandbox is named
        r = delete_volume(v2, "adopted")
        assert r.status_code == 409 and s["id"] in error_of(r), r.text
        assert sh(v2, s["id"], "echo two >> /mnt/a/f && cat /mnt/a/f")[1] == "one\ntwo\n"
        # a restart of its kernel binds the volume again, through the view kept for it
        assert v2.client.post(f"api/kernels/{s['id']}/restart").status_code == 200
        assert v2.execute(s["id"], "print(open('/mnt/a/f').read(), end='')").stdout == "one\ntwo\n"
        assert v2.remove(s["id"]).status_code == 204
        assert delete_volume(v2, "adopted").status_code == 204
    finally:
        second.stop()  # a plain stop: the keeper ends with it
        with contextlib.suppress(OSError):  # unless the test failed first: stopped by its pid
            with open(f"/proc/{keeper}/cmdline", "rb") as f:
                if first.data_dir.encode() in f.read():
                    os.kill(keeper, signal.SIGKILL)
    assert loops_backed_by(first.data_dir) == []


def test_a_delete_a_dead_daemon_left_half_done_is_finished_at_start(make_daemon):
    import signal
    from helpers.daemon import mounts_under
    from helpers.v1 import V1
    first = make_daemon()
    create_volume(V1(first), "half", size="16M")
    create_volume(V1(first), "whole", size="16M")
    folder = os.path.join(first.data_dir, "named-volumes")
    # killed just after the delete removed the record (its first step): image and mount remain
    first.stopped_by_us = True
    os.kill(first.pid, signal.SIGKILL)
    first.proc.wait(timeout=30)
    os.unlink(os.path.join(folder, "volume-half.json"))
    second = make_daemon(start=False)
    second.data_dir = first.data_dir
    second.start()
    assert "removing volume half, which a previous daemon was deleting" in second.log_text()
    assert not os.path.exists(os.path.join(folder, "volume-half.img"))
    assert not any(p.endswith("/volume-half") for p in mounts_under(folder))
    # the other one is untouched, and its mount (left by the killed daemon) used again
    assert [v["name"] for v in V1(second).get("v1/volumes").json()] == ["whole"]
    assert [p for p in mounts_under(folder)] == [os.path.join(folder, "volume-whole")]
    second.stop()
    assert loops_backed_by(first.data_dir) == []
