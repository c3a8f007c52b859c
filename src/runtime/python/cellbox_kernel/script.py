"""Stateless runs (/v1/run): code blocks run as scripts, with AutoGen's command-line semantics.

The daemon sends one silent execute_request calling run(); output goes out as the kernel's usual
stream messages (the daemon collects them), and the outcome — each block's exit code, the files
asked for — comes back as one display_data of type application/vnd.cellbox.run+json.

Python blocks run in this (preloaded) interpreter, each in a fresh __main__ namespace, the way
`python3 file.py` would run them: sys.exit(n) gives n, an uncaught exception prints its traceback
and gives 1. Shell blocks run as `bash -c` / `sh -c` children writing straight into our stdout
and stderr pipes; JavaScript blocks as `node FILE`, TypeScript ones as `node FILE` after
TypeScript's transpileModule (Debian's node-typescript), R ones as `Rscript FILE`, each FILE
written to a private temporary directory. A KeyboardInterrupt (the daemon's timeout) stops the
run with 124.
"""
import base64
import builtins
import io
import json
import linecache
import os
import subprocess
import sys
import traceback

from IPython.display import publish_display_data

MIME = "application/vnd.cellbox.run+json"
BLOCK_MIME = "application/vnd.cellbox.block+json"  # marks where a block's output starts
TIMEOUT_EXIT_CODE = 124
FETCH_LIMIT = 64 << 20


def _place_files(files):
    """Writes the run's input files; False (after saying why on stderr) if one cannot be."""
    for path, content in (files or {}).items():
        try:
            data = base64.b64decode(content)
            directory = os.path.dirname(path)
            if directory:
                os.makedirs(directory, exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        except (ValueError, OSError) as error:
            print(f"cellbox: cannot write the input file {path!r}: {error}", file=sys.stderr)
            return False
    return True


def _exit_code_of(exit_request):
    code = exit_request.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run_python(code, filename, stdin_text):
    # The source goes to linecache so tracebacks show the lines, as they would from a file.
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    namespace = {"__name__": "__main__", "__file__": filename, "__builtins__": builtins}
    saved_argv, saved_stdin = sys.argv, sys.stdin
    sys.argv = [filename]
    sys.stdin = io.StringIO(stdin_text or "")
    try:
        exec(compile(code, filename, "exec"), namespace)
        return 0
    except SystemExit as exit_request:
        return _exit_code_of(exit_request)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: B902 — a script's uncaught exception of any kind
        tb = error.__traceback__.tb_next if error.__traceback__ else None  # not our frame
        traceback.print_exception(type(error), error, tb, file=sys.stderr)
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.argv, sys.stdin = saved_argv, saved_stdin


def _run_shell(shell, code, stdin_text):
    return _run_command([shell, "-c", code], stdin_text)


def _run_command(argv, stdin_text):
    sys.stdout.flush()
    sys.stderr.flush()
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=1, stderr=2,
                             start_new_session=False)
    try:
        child.communicate(input=(stdin_text or "").encode())
    except KeyboardInterrupt:
        child.kill()
        child.wait()
        raise
    code = child.returncode
    return code if code >= 0 else 128 - code


# How a script of each language runs: its file's suffix and the command (FILE is its path).
_SCRIPT_COMMANDS = {
    "javascript": (".js", ["/usr/bin/node", "FILE"]),
    "typescript": (".ts", ["/usr/bin/node", "-e", "\n".join([
        "const ts = require('/usr/share/nodejs/typescript');",
        "const fs = require('fs'), path = require('path').resolve(process.argv[1]);",
        "const out = ts.transpileModule(fs.readFileSync(path, 'utf8'), {fileName: path,",
        "  compilerOptions: {module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022}});",
        "fs.writeFileSync(path + '.js', out.outputText);",
        "process.argv.splice(1, 1, path + '.js');",
        "require('module').runMain();"]), "FILE"]),
    "r": (".R", ["/usr/bin/Rscript", "FILE"]),
}


def _run_script(language, code, index, stdin_text):
    import tempfile
    suffix, command = _SCRIPT_COMMANDS[language]
    with tempfile.TemporaryDirectory(prefix="cellbox-run-") as directory:
        path = os.path.join(directory, f"block_{index + 1}{suffix}")
        with open(path, "w") as f:
            f.write(code)
        return _run_command([path if part == "FILE" else part for part in command], stdin_text)


def _fetch(paths):
    fetched = {}
    for path in paths or []:
        try:
            if os.path.isfile(path) and os.path.getsize(path) <= FETCH_LIMIT:
                with open(path, "rb") as f:
                    fetched[path] = base64.b64encode(f.read()).decode()
        except OSError:
            pass
    return fetched


def run(request_text):
    request = json.loads(request_text)
    outcome = {"blocks": [], "exit_code": 0, "timed_out": False, "files": {}}
    try:
        if not _place_files(request.get("files")):
            outcome["exit_code"] = 1
            return
        for index, block in enumerate(request["blocks"]):
            language = block["language"]
            sys.stdout.flush()
            sys.stderr.flush()
            publish_display_data({BLOCK_MIME: {"index": index}})
            try:
                if language == "python":
                    code = _run_python(block["code"], f"block_{index + 1}.py", request.get("stdin"))
                elif language in _SCRIPT_COMMANDS:
                    code = _run_script(language, block["code"], index, request.get("stdin"))
                else:
                    code = _run_shell("bash" if language == "bash" else "sh", block["code"],
                                      request.get("stdin"))
            except KeyboardInterrupt:
                outcome["timed_out"] = True
                code = TIMEOUT_EXIT_CODE
            outcome["blocks"].append({"language": language, "exit_code": code})
            outcome["exit_code"] = code
            if code != 0:
                break
    finally:
        outcome["files"] = _fetch(request.get("fetch_files"))
        publish_display_data({MIME: outcome})
