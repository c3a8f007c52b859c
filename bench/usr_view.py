"""A template's /usr as an overlay view or as a loop-mounted image: which starts faster and which
shares more (issue 22 asks). Measured outside the daemon, which has only the overlay:

- overlay: an overlayfs with the template's layers' usr/ over the host's /usr (what the daemon
  mounts as views/<name>/usr), mounted read-only;
- image: an ext4 image (mkfs.ext4 -d, no mount needed to fill it) holding a copy of the same
  tree as far as the import reads it (below), loop-mounted read-only.

Each sample runs `python3 -c 'import <package>, numpy'` in a fresh mount namespace
(`unshare -m`, private propagation: nothing reaches the host's mounts) whose /usr is the kind
under test. "cold_fresh_mount": the kind is mounted afresh for each sample after the page cache
of its own files, and only theirs, was dropped (posix_fadvise DONTNEED on the layers' files or
the image file; the machine's other caches are left alone: other work shares it); the host's
/usr stays cached, as it is on a machine whose python3 sandboxes run. "warm_mounted_once": both
kinds mounted once in a holder namespace (as the daemon mounts a view once per template) and
bound over /usr in each sample's namespace, after one import warmed them. Figures: wall time of
the whole command (namespace, mount, interpreter start, imports) and the imports alone, and the
page cache only that kind holds after one cold import (fincore: the layers' files for the
overlay, the image file for the image), which nothing else on the host shares.

The image is not all of /usr (9 GiB here): the interpreter, its standard library, the package
directories of every module the import loaded and every shared object it mapped (with the
symbolic links that name them), as read through the overlay itself; the import is checked to
succeed in the image before any sample counts.
"""
import os
import shutil
import subprocess
import sys
import time

PYTHON = "/usr/bin/python3"
TIMED_IMPORT = ("import time; t = time.perf_counter(); import {modules}; "
                "print(time.perf_counter() - t)")
# What the probe prints: every file the import loaded (modules) or mapped (shared objects).
PROBE = """
import sys
import {modules}
paths = set()
for module in list(sys.modules.values()):
    path = getattr(module, '__file__', None)
    if path:
        paths.add(path)
with open('/proc/self/maps') as maps:
    for line in maps:
        fields = line.split()
        if len(fields) >= 6 and fields[5].startswith('/usr/'):
            paths.add(fields[5])
print('\\n'.join(sorted(paths)))
"""
SITE_DIRS = ("/usr/lib/python3/dist-packages/", "/usr/local/lib/python3.11/dist-packages/",
             "/usr/lib/python3.11/")
LIBRARY_DIR = "/usr/lib/x86_64-linux-gnu"


def in_namespace(mount_command, argv, timeout=300, holder=None):
    """Runs argv (a list) in a fresh private mount namespace after `mount_command` (a shell
    line) mounted the /usr under test; (seconds of wall time, the finished process). With
    `holder` (a Holder), the namespace is made inside the holder's, whose mounts it sees."""
    script = f'{mount_command} && exec "$@"'
    enter = ["nsenter", "--target", str(holder.pid), "--mount"] if holder else []
    started = time.perf_counter()
    done = subprocess.run([*enter, "unshare", "--mount", "--propagation", "private", "sh", "-c",
                           script, "sh", *argv], capture_output=True, text=True, timeout=timeout)
    return time.perf_counter() - started, done


def overlay_mount(layer_usr_dirs, target="/usr"):
    """The shell line that mounts the overlay view at `target`: layers top first, the host's
    /usr at the bottom."""
    lower = ":".join([*layer_usr_dirs, "/usr"])
    return f"mount -t overlay overlay -o ro,lowerdir={lower} {target}"


def image_mount(image, target="/usr"):
    return f"mount -o ro,loop {image} {target}"


class Holder:
    """A process in a mount namespace of its own that holds both kinds mounted once (as the
    daemon mounts a template's view once), at workdir/overlay and workdir/image; a sample
    binds one over /usr. Ended by its pid; its namespace, mounts and loop device go with it."""

    def __init__(self, mount_commands, workdir):
        script = " && ".join([*mount_commands, "echo ready", "exec sleep 3600"])
        self.process = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh",
                                         "-c", script], stdout=subprocess.PIPE, text=True)
        self.pid = self.process.pid
        if self.process.stdout.readline().strip() != "ready":
            self.stop()
            raise RuntimeError("could not mount both kinds once")

    def stop(self):
        self.process.kill()
        self.process.wait(timeout=30)


def drop_cached(paths):
    """Drops the page cache of these files only (a directory: every file under it)."""
    for top in paths:
        walk = os.walk(top) if os.path.isdir(top) else [(os.path.dirname(top), [], [os.path.basename(top)])]
        for directory, _, files in walk:
            for name in files:
                path = os.path.join(directory, name)
                if os.path.islink(path):
                    continue
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError:
                    continue
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


def cached_mib(paths):
    """Page cache resident for these files (fincore), MiB."""
    files = []
    for top in paths:
        if os.path.isdir(top):
            files += [os.path.join(d, f) for d, _, names in os.walk(top) for f in names
                      if not os.path.islink(os.path.join(d, f))]
        else:
            files.append(top)
    total = 0
    for start in range(0, len(files), 200):
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *files[start:start + 200]],
                             capture_output=True, text=True, timeout=60).stdout
        total += sum(int(line) for line in out.split())
    return total / (1 << 20)


def loaded_files(mount_command, modules):
    """The files under /usr the import loads or maps, as the overlay shows them."""
    _, done = in_namespace(mount_command, [PYTHON, "-c", PROBE.format(modules=modules)])
    if done.returncode != 0:
        raise RuntimeError(f"the import failed in the overlay view: {done.stderr[-2000:]}")
    return [line for line in done.stdout.splitlines() if line.startswith("/usr/")]


def tree_to_copy(files):
    """Paths to copy into the image: the interpreter and its standard library, each loaded
    module's top-level package directory, each mapped shared object and the links naming it."""
    wanted = {"/usr/bin/python3", "/usr/bin/python3.11", "/usr/lib/python3.11", "/usr/lib64"}
    for path in files:
        site = next((s for s in SITE_DIRS if path.startswith(s)), None)
        if site:
            top = path[len(site):].split("/")[0]
            wanted.add(site + top)
        else:
            wanted.add(path)
    return wanted


def copy_tree(mount_command, wanted, staging):
    """Copies `wanted` (paths under /usr) from the view `mount_command` mounts over /usr (seen
    from inside its namespace) into staging/, keeping links, modes and owners; also the .pth
    files of the site directories, which every interpreter start reads."""
    lines = "\n".join(sorted(wanted))
    script = f"""
import os, shutil, sys
staging = {staging!r}
library_dir = {LIBRARY_DIR!r}
wanted = {lines!r}.splitlines()
def copy(path):
    target = staging + path[len('/usr'):]
    if os.path.lexists(target):
        return
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.islink(path):
        os.symlink(os.readlink(path), target)
        copy(os.path.normpath(os.path.join(os.path.dirname(path), os.readlink(path)))
             if not os.readlink(path).startswith('/') else os.readlink(path))
    elif os.path.isdir(path):
        shutil.copytree(path, target, symlinks=True)
    elif os.path.exists(path):
        shutil.copy2(path, target)
real = {{}}
for entry in os.scandir(library_dir):
    if entry.is_symlink():
        real.setdefault(os.path.realpath(entry.path), []).append(entry.path)
for site in {SITE_DIRS[:2]!r}:
    if os.path.isdir(site):
        wanted += [site + name for name in os.listdir(site) if name.endswith('.pth')]
for path in wanted:
    if path.startswith('/usr/'):
        copy(path)
        for link in real.get(os.path.realpath(path), []):
            copy(link)
"""
    _, done = in_namespace(mount_command, [PYTHON, "-c", script])
    if done.returncode != 0:
        raise RuntimeError(f"copying the tree failed: {done.stderr[-2000:]}")


def make_image(staging, image):
    size_mib = int(sum(os.lstat(os.path.join(d, f)).st_size for d, _, names in os.walk(staging)
                       for f in names) * 1.3 / (1 << 20)) + 64
    subprocess.run(["mkfs.ext4", "-q", "-F", "-d", staging, image, f"{size_mib}M"], check=True,
                   capture_output=True, timeout=600)
    with open(image, "rb") as f:
        os.fsync(f.fileno())
    return size_mib


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def timed_import(mount_command, modules, holder=None):
    """One sample: (wall ms of the whole command, ms of the imports alone)."""
    wall, done = in_namespace(mount_command, [PYTHON, "-c", TIMED_IMPORT.format(modules=modules)],
                              holder=holder)
    if done.returncode != 0:
        raise RuntimeError(f"the timed import failed: {done.stderr[-2000:]}")
    return wall * 1000, float(done.stdout.split()[-1]) * 1000


def alternating(kinds, runs, sample):
    """`runs` rounds, one sample of each kind in turn (a shared machine's drift then falls on
    both alike): {kind: {wall_p50_ms, wall_max_ms, import_p50_ms}}."""
    walls, imports = {kind: [] for kind in kinds}, {kind: [] for kind in kinds}
    for _ in range(runs):
        for kind in kinds:
            wall, imported = sample(kind)
            walls[kind].append(wall)
            imports[kind].append(imported)
    return {kind: {"wall_p50_ms": pct(walls[kind], 50), "wall_max_ms": max(walls[kind]),
                   "import_p50_ms": pct(imports[kind], 50)} for kind in kinds}


def cold_fresh_mounts(mounts, owns, modules, runs):
    """Each sample mounts its kind afresh after dropping the page cache of that kind's own
    files; then the page cache one cold import leaves to each kind alone."""
    def sample(kind):
        drop_cached(owns[kind])
        return timed_import(mounts[kind], modules)
    figures = alternating(list(mounts), runs, sample)
    for kind in mounts:
        drop_cached(owns[kind])
        timed_import(mounts[kind], modules)
        figures[kind]["own_page_cache_after_one_import_mib"] = cached_mib(owns[kind])
    return figures


def mounted_once(overlay, image, modules, runs, workdir):
    """Warm samples of both kinds as the daemon would serve them: each mounted once, bound over
    /usr in each sample's namespace, after one import warmed it."""
    targets = {kind: os.path.join(workdir, kind) for kind in ("overlay", "image")}
    for target in targets.values():
        os.makedirs(target, exist_ok=True)
    holder = Holder([overlay(targets["overlay"]), image(targets["image"])], workdir)
    binds = {kind: f"mount --bind {target} /usr" for kind, target in targets.items()}
    try:
        for bind in binds.values():
            timed_import(bind, modules, holder)
        return alternating(list(binds), runs, lambda kind: timed_import(binds[kind], modules, holder))
    finally:
        holder.stop()


def compare(layer_dirs, modules, workdir, runs=5):
    """layer_dirs: the template's layers, top first (each a directory holding usr/ and more).
    Returns the figures of both kinds, or {"not_measured": why}."""
    if os.geteuid() != 0:
        return {"not_measured": "mount namespaces and loop devices need root"}
    layer_usr = [os.path.join(d, "usr") for d in layer_dirs if os.path.isdir(os.path.join(d, "usr"))]
    overlay = overlay_mount(layer_usr)
    staging, image = os.path.join(workdir, "image-tree"), os.path.join(workdir, "usr.ext4")
    os.makedirs(staging)
    try:
        copy_tree(overlay, tree_to_copy(loaded_files(overlay, modules)), staging)
        image_mib = make_image(staging, image)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    try:
        cold = cold_fresh_mounts({"overlay": overlay, "image": image_mount(image)},
                                 {"overlay": layer_usr, "image": [image]}, modules, runs)
        warm = mounted_once(lambda target: overlay_mount(layer_usr, target),
                            lambda target: image_mount(image, target), modules, runs, workdir)
        figures = {"modules": modules, "runs": runs, "image_mib": image_mib}
        for kind in ("overlay", "image"):
            figures[kind] = {"cold_fresh_mount": cold[kind], "warm_mounted_once": warm[kind]}
        figures["cold_wall_ratio_image_over_overlay"] = (cold["image"]["wall_p50_ms"] /
                                                         cold["overlay"]["wall_p50_ms"])
        figures["warm_wall_ratio_image_over_overlay"] = (warm["image"]["wall_p50_ms"] /
                                                         warm["overlay"]["wall_p50_ms"])
        return figures
    finally:
        os.unlink(image)


if __name__ == "__main__":
    # By hand: usr_view.py MODULES LAYER_DIR... (layers top first), e.g. a layer made by
    # `pip install --target LAYER/usr/local/lib/python3.11/dist-packages`.
    import json
    import tempfile
    work = tempfile.mkdtemp(prefix="cellbox-usr-view-", dir="/var/tmp")
    try:
        print(json.dumps(compare(sys.argv[2:], sys.argv[1], work), indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
