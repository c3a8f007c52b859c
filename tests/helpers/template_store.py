"""Templates with files of their own, put in a daemon's data directory before it starts, the way
the daemon keeps them (model/templates.h): a layer under DATA_DIR/templates/layers/<key>/ at
root-relative paths, and a record DATA_DIR/templates/<name>.json naming its layers. The daemon
mounts each recorded template's view at start (templates_init), so a test gets a template with
packages of its own without a Dockerfile build or a production route to plant one."""
import json
import os
import secrets


def layer_key():
    return secrets.token_hex(8)


def write_layer(data_dir, files, key=None):
    """A layer holding `files` ({root-relative path: text}), owned by root as a committed layer
    is; returns its key."""
    key = key or layer_key()
    root = os.path.join(data_dir, "templates", "layers", key)
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
    return key


def write_record(data_dir, name, layers, env=(), workdir=None, preload="", pool_size=0):
    os.makedirs(os.path.join(data_dir, "templates"), exist_ok=True)
    record = {"name": name, "from": "cellbox", "layers": list(layers), "env": list(env),
              "workdir": workdir, "user": "user", "preload": preload, "pool_size": pool_size,
              "kind": "dockerfile", "dockerfile": None, "build_seconds": 0.0,
              "created_at": "2026-11-26T00:00:00Z", "size_bytes": 0}
    with open(os.path.join(data_dir, "templates", f"{name}.json"), "w") as f:
        json.dump(record, f)


ROOTFS_PACKAGES = ("python3.11", "libpython3.11", "python3-ipython", "libjansson4", "libseccomp2")
SKIPPED_PREFIXES = ("/usr/share/doc", "/usr/share/man", "/usr/share/locale", "/usr/share/info",
                    "/usr/share/lintian")


def host_rootfs_paths(packages=ROOTFS_PACKAGES):
    """The host's installed files of `packages` and their installed dependencies (dpkg -L of
    apt-cache depends --recurse --installed), as merged-/usr paths, docs left out: a Debian root
    filesystem of about 70 MiB in which a cellbox kernel runs."""
    import subprocess
    depends = subprocess.run(
        ["apt-cache", "depends", "--recurse", "--installed", "--no-recommends", "--no-suggests",
         "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", *packages],
        capture_output=True, text=True, timeout=60).stdout
    names = sorted({line.strip() for line in depends.splitlines()
                    if line and not line.startswith(" ") and "<" not in line})
    listed = subprocess.run(["dpkg", "-L", *names], capture_output=True, text=True,
                            timeout=60).stdout.splitlines()
    paths = set()
    for path in listed + ["/etc/ld.so.cache"]:
        if not path.startswith("/") or path.startswith(SKIPPED_PREFIXES):
            continue
        if not os.path.lexists(path) or (os.path.isdir(path) and not os.path.islink(path)):
            continue
        merged = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        if merged.startswith(("/usr/", "/etc/")):
            paths.add(merged)
    return sorted(paths)


def write_rootfs_tar(target, paths, leave_out=(), extra=None):
    """A tarball of `paths` (absolute host paths, stored relative to /), without those under any
    of `leave_out` (root-relative prefixes); `extra(tar)` may add entries of its own."""
    import tarfile
    with tarfile.open(target, "w") as tar:
        for path in paths:
            name = path.lstrip("/")
            if any(name.startswith(prefix) for prefix in leave_out):
                continue
            tar.add(path, arcname=name, recursive=False)
        if extra:
            extra(tar)
    return target
