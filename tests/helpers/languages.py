"""What each non-Python language's cells look like, for the tests that run them all alike
(tests/integration/test_languages.py, tests/security/test_languages_hostile.py, tests/clients).

One Lang per language: the kernelspec cellboxd names it by (KG), the name /v1, E2B and MCP take,
and the cells a test needs, each written the way a user of that language would write it.
"""
import base64
import os
import shutil

# A 1x1 PNG, the smallest picture a kernel can be asked to show.
PNG_1x1 = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")).decode()


class Lang:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        return self.name


JAVASCRIPT = Lang(
    name="javascript", kernelspec="javascript", v1="javascript", e2b="js",
    set_state="let counter = 41;\nfunction bump(n) { return n + 1; }",
    read_state="bump(counter)", state_text="42",
    forgotten="typeof counter", forgotten_text="'undefined'",
    alive="'al' + 'ive'", alive_text="'alive'",
    print_then_value="console.log('first');\nconsole.error('second');\n6 * 7",
    value_text="42",
    spin="console.log('spinning');\nwhile (true) {}",
    many_lines="for (let i = 0; i < {n}; i++) console.log('line ' + i);",
    error="function fail() { throw new Error('boom'); }\nfail()", error_name="Error",
    error_value="boom", traceback_names="fail",
    exit_code="process.exit(3)", exit_status=3,
    kill_self="process.kill(process.pid, 'SIGKILL')",
    write_file="require('fs').writeFileSync('/workspace/from-js.txt', 'js wrote this')",
    read_file="require('fs').readFileSync('/workspace/{name}', 'utf8')",
)

TYPESCRIPT = Lang(
    name="typescript", kernelspec="typescript", v1="typescript", e2b="ts",
    set_state="interface Box { n: number }\nlet counter: number = 41;\n"
              "function bump(b: Box): number { return b.n + 1; }",
    read_state="bump({ n: counter })", state_text="42",
    forgotten="typeof counter", forgotten_text="'undefined'",
    alive="('al' as string) + 'ive'", alive_text="'alive'",
    print_then_value="console.log('first');\nconsole.error('second');\nconst six: number = 6;\nsix * 7",
    value_text="42",
    spin="console.log('spinning');\nwhile (true) {}",
    many_lines="for (let i: number = 0; i < {n}; i++) console.log('line ' + i);",
    error="function fail(why: string): never { throw new TypeError(why); }\nfail('boom')",
    error_name="TypeError", error_value="boom", traceback_names="fail",
    exit_code="process.exit(3)", exit_status=3,
    kill_self="process.kill(process.pid, 'SIGKILL')",
    write_file="require('fs').writeFileSync('/workspace/from-ts.txt', 'ts wrote this')",
    read_file="require('fs').readFileSync('/workspace/{name}', 'utf8')",
)

BASH = Lang(
    name="bash", kernelspec="bash", v1="bash", e2b="bash",
    set_state="counter=41\nbump() { echo $(( $1 + 1 )); }\ncd /tmp",
    read_state="bump $counter; pwd", state_text="42\n/tmp\n",
    forgotten='echo "${counter:-unset}"', forgotten_text="unset\n",
    alive="echo al$(echo ive)", alive_text="alive\n",
    print_then_value="echo first\necho second >&2\necho 42",
    value_text=None,  # bash has no values, only output
    spin="echo spinning\nsleep 60",
    many_lines="for ((i = 0; i < {n}; i++)); do echo line $i; done",
    error="echo before\nfalse", error_name=None, error_value="1", traceback_names=None,
    exit_code="exit 4", exit_status=4,
    kill_self="kill -9 $$",
    write_file="echo -n 'bash wrote this' > /workspace/from-bash.txt",
    read_file="cat /workspace/{name}",
)

R = Lang(
    name="r", kernelspec="ir", v1="r", e2b="r",
    set_state="counter <- 41\nbump <- function(n) n + 1",
    read_state="bump(counter)", state_text="[1] 42",
    forgotten="exists('counter')", forgotten_text="[1] FALSE",
    alive="paste0('al', 'ive')", alive_text='[1] "alive"',
    print_then_value="cat('first\\n')\nmessage('second')\n6 * 7",
    value_text="[1] 42",
    spin="cat('spinning\\n')\nSys.sleep(60)",
    many_lines="for (i in seq_len({n}) - 1) cat('line ', i, '\\n', sep = '')",
    error="fail <- function() stop('boom')\nfail()", error_name=None, error_value="boom",
    traceback_names="fail",
    # IRkernel replaces quit() with a polite no-op: the internal one ends R for real.
    exit_code='.Internal(quit("no", 5L, FALSE))', exit_status=5,
    kill_self="tools::pskill(Sys.getpid(), tools::SIGKILL)",
    write_file="writeLines('r wrote this', '/workspace/from-r.txt', sep = '')",
    read_file="cat(readLines('/workspace/{name}', warn = FALSE))",
)

ALL = [JAVASCRIPT, TYPESCRIPT, BASH, R]


def missing_runtime(lang):
    """Why this host cannot run `lang` at all (then its tests are skipped), else None."""
    if lang in (JAVASCRIPT, TYPESCRIPT) and not os.access("/usr/bin/node", os.X_OK):
        return "/usr/bin/node is not installed (apt-get install nodejs)"
    if lang is R and not os.path.exists("/usr/share/jupyter/kernels/ir/kernel.json"):
        return "IRkernel is not installed (apt-get install r-cran-irkernel)"
    if lang is R and not shutil.which("R", path="/usr/bin"):
        return "R is not installed"
    return None
