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
