"""Building templates from Dockerfiles in tests (model/template_build.h, POST /v1/templates).

`post_build(daemon, name, dockerfile, context={path: bytes|str}, **fields)` sends the build as
multipart/form-data (the context as a tar made in memory) and reads the NDJSON stream to its
end; it returns a Build: the status, the events (or the error body) and helpers to read them.
`leftovers(daemon)` lists what a build may leave behind in the daemon's data directory: staged
layers, mounted build views, registry records of build sandboxes."""
import io
import json
import os
import subprocess
import tarfile

import requests

TIMEOUT = 300


def context_tar(files):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for path, content in sorted(files.items()):
            if isinstance(content, tuple):  # ("symlink", target)
                info = tarfile.TarInfo(path)
                info.type = tarfile.SYMTYPE
                info.linkname = content[1]
                tar.addfile(info)
                continue
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class Build:
    def __init__(self, status, events, body):
        self.status = status
        self.events = events
        self.body = body

    def of(self, kind):
        return [e for e in self.events if e["type"] == kind]

    @property
    def last(self):
        return self.events[-1] if self.events else None

    def output(self, step=None):
        return "".join(e["text"] for e in self.of("output") if step is None or e["step"] == step)

    def steps(self):
        return self.of("step")

    def __repr__(self):
        return f"Build({self.status}, {self.events or self.body})"


def post_build(daemon, name, dockerfile, context=None, stream_callback=None, **fields):
    url = daemon.origin + "/v1/templates"
    headers = {"Authorization": f"token {daemon.token}"} if daemon.token else {}
    form = {"name": (None, name), "dockerfile": (None, dockerfile)}
    for key, value in fields.items():
        form[key] = (None, value if isinstance(value, str) else json.dumps(value))
    if context is not None:
        form["context"] = ("context.tar", context_tar(context), "application/x-tar")
    r = requests.post(url, files=form, headers=headers, stream=True, timeout=TIMEOUT)
    if r.status_code != 200:
        return Build(r.status_code, [], r.json())
    events = []
    try:
        for line in r.iter_lines():
            if not line:
                continue
            event = json.loads(line)
            events.append(event)
            if stream_callback and stream_callback(event, r) is False:
                r.close()
                break
    except requests.exceptions.ChunkedEncodingError:
        pass  # the daemon went away mid-stream (a test killed it): what came is kept
    return Build(r.status_code, events, None)


def findmnt_under(path):
    out = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True,
                         timeout=30).stdout.split()
    return [m for m in out if m.startswith(path)]


def leftovers(daemon):
    """What a finished (or failed, or abandoned) build must not leave."""
    templates = os.path.join(daemon.data_dir, "templates")
    staging = os.path.join(templates, "staging")
    builds = os.path.join(templates, "builds")
    registry = os.path.join(daemon.data_dir, "sandboxes")
    found = []
    if os.path.isdir(staging):
        found += [f"staging/{n}" for n in os.listdir(staging)]
    found += [f"mount {m}" for m in findmnt_under(builds)]
    if os.path.isdir(builds):
        found += [f"builds/{n}" for n in os.listdir(builds)]
    if os.path.isdir(registry):
        found += [f"sandboxes/{n}" for n in os.listdir(registry)]
    return found


def layer_dirs(daemon):
    layers = os.path.join(daemon.data_dir, "templates", "layers")
    return set(os.listdir(layers)) if os.path.isdir(layers) else set()
