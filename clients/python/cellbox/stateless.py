"""cellbox.run: a stateless run (POST /v1/run). A fresh sandbox from the daemon's warm pool runs
the code (or the code blocks, in order, with AutoGen's command-line semantics: python as a
script, bash/sh with the shell, stop at the first non-zero exit) and is destroyed."""
import base64

from ._transport import DEFAULT_REQUEST_TIMEOUT, Connection
from .models import RunResult


def _block(block):
    if isinstance(block, dict):
        return {"language": block.get("language", "python"), "code": block["code"]}
    if isinstance(block, (tuple, list)):
        language, code = block
        return {"language": language, "code": code}
    return {"language": getattr(block, "language", "python") or "python", "code": block.code}


def run(code=None, language="python", *, code_blocks=None, files=None, fetch_files=None,
        timeout_s=None, max_output=None, memory_mb=None, stdin=None, url=None, token=None,
        request_timeout=DEFAULT_REQUEST_TIMEOUT):
    """Run `code` in `language` ("python", "bash", "sh") — or `code_blocks` (dicts
    {"language", "code"}, (language, code) pairs or objects with .language/.code) — in a fresh
    sandbox and return a RunResult. files: {path: str|bytes} written first; fetch_files:
    paths whose bytes come back in RunResult.files; timeout_s covers the run (exit code 124,
    status "timeout")."""
    if (code is None) == (code_blocks is None):
        raise ValueError("pass either code or code_blocks")
    body = {}
    if code_blocks is not None:
        body["code_blocks"] = [_block(b) for b in code_blocks]
    else:
        body["language"], body["code"] = language, code
    if files:
        body["files"] = {path: base64.b64encode(data.encode() if isinstance(data, str) else bytes(data)).decode()
                         for path, data in files.items()}
    for name, value in (("fetch_files", fetch_files), ("timeout_s", timeout_s), ("max_output", max_output),
                        ("memory_mb", memory_mb), ("stdin", stdin)):
        if value is not None:
            body[name] = list(value) if name == "fetch_files" else value
    connection = Connection(url, token, request_timeout)
    wait = max(request_timeout or 0, (timeout_s or 0) + 30)
    return RunResult.from_model(connection.call("POST", "v1/run", json_body=body, timeout=wait))
