"""The kernel's shortcuts around IPython's per-cell work (cellbox_kernel/fast_paths.py and the
C cell-name hash) give exactly what IPython's and ipykernel's own code gives.

Each test runs its comparison inside a real cellbox-kernel, against the stock IPython class or
ipykernel function called on the same input, and checks that the shortcut was actually taken
where it should be (else the comparison would prove nothing).

Run:  /usr/bin/python3 -m pytest -q tests/kernel/test_fast_paths.py
"""
import json


def evaluate(kernel, code):
    """Runs `code` (whose last line is an expression giving a JSON string) and returns it
    decoded; fails with the traceback if the cell raised."""
    exchange = kernel.execute(code)
    errors = exchange.of_type("error")
    assert not errors, "\n".join(errors[0]["content"]["traceback"])
    return json.loads(eval(exchange.one("execute_result")["content"]["data"]["text/plain"]))


def test_cell_file_names_are_ipykernels_and_hashed_in_c(kernel):
    result = evaluate(kernel, r'''
import json, random
from cellbox_kernel import compiler
from ipykernel.compiler import get_file_name, murmur2_x86
rng = random.Random(7)
alphabet = "abc xyz\n\t\"'\\é中😀\x00"
texts = ["", "1", "12", "123", "1234", "12345", "1+1", "é", "😀" * 3]
texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 3000))) for _ in range(300)]
mismatches = [t[:40] for t in texts if compiler.cell_file_name(t) != get_file_name(t)]
seeds = [s for s in (0, 1, 0x7FFFFFFF, 0xFFFFFFFF) if compiler._cell_hash("seed", s) != murmur2_x86("seed", s)]
try:
    compiler._cell_hash("\ud800", 1)
    surrogate = "accepted"
except UnicodeEncodeError:
    surrogate = "UnicodeEncodeError"
json.dumps({"mismatches": mismatches, "seeds": seeds, "surrogate": surrogate,
            "native": type(compiler._cell_hash).__name__})''')
    assert result["native"] == "builtin_function_or_method"  # the C one is the one in use
    assert result["mismatches"] == [] and result["seeds"] == []
    assert result["surrogate"] == "UnicodeEncodeError"  # as str.encode("utf8") in ipykernel's


TRANSFORM_CORPUS = [
    "1+1", "x = 1\ny = 2\nx + y", "def f(a):\n    return a / 2\nf(4)", "a = b // c",
    "%pwd", "x = %pwd", "x = !echo hi", "!echo hi", "!!ls", "%%time\n1", "obj?", "obj??", "?obj",
    "len?\n", ",f a b", ";f a b", "/f a b", "    %time 1", "if True:\n    !echo hi",
    "s = 'what?'", "s = '100%'", "# a comment?\n1", 's = """\n/not an escape\n"""\n',
    "x = (1,\n     2)", "  x = 1", ">>> 1 + 1", "In [1]: 1 + 1", "a = 1 \\\n  + 2", "",
    "print('unterminated", "x = $y", "x = 1; y = 2", "\n\n  \n1", "a != b", "x %= 2",
    "x = !=y", "!!=", "%=x", "!=x", "if a!=b: pass", "x = a % b", "f'{x!r}'",
]


def test_token_transforms_agree_with_ipython_and_are_skipped_for_plain_code(kernel):
    result = evaluate(kernel, "import json\nCORPUS = " + json.dumps(TRANSFORM_CORPUS) + r'''
from IPython.core.inputtransformer2 import TransformerManager
manager = get_ipython().input_transformer_manager
stock = TransformerManager()
differences = []
for cell in CORPUS:
    try:
        ours = manager.transform_cell(cell)
    except Exception as error:
        ours = "raised " + type(error).__name__
    try:
        theirs = stock.transform_cell(cell)
    except Exception as error:
        theirs = "raised " + type(error).__name__
    if ours != theirs:
        differences.append([cell, ours, theirs])
tokenized = []
original = manager.do_one_token_transform
manager.do_one_token_transform = lambda lines: tokenized.append(1) or original(lines)
try:
    manager.transform_cell("x = 1\nfor i in range(3):\n    if i != 1:\n        x += i\nx %= 5\nx")
    plain = len(tokenized)
    manager.transform_cell("x = %pwd")
    magic = len(tokenized) - plain
    # A transformer of the user's own: the shortcut must step aside for it.
    manager.token_transformers.append(manager.token_transformers[-1])
    manager.transform_cell("x = 1")
    custom = len(tokenized) - plain - magic
finally:
    manager.token_transformers.pop()
    del manager.do_one_token_transform
json.dumps({"differences": differences, "plain": plain, "magic": magic, "custom": custom})''')
    assert result["differences"] == []
    assert result["plain"] == 0          # no tokenizing for plain Python
    assert result["magic"] >= 1 and result["custom"] >= 1


def test_trailing_semicolon_silences_exactly_as_in_ipython(kernel):
    shown = {}
    for code in ["1+1;", "1+1 ;  # done", "1+1", "1+1  # a ; in a comment", "'a;b'", "x = 3;\nx",
                 "x;", "(1,\n 2);"]:
        shown[code] = bool(kernel.execute(code).of_type("execute_result"))
    assert shown == {"1+1;": False, "1+1 ;  # done": False, "1+1": True,
                     "1+1  # a ; in a comment": True, "'a;b'": True, "x = 3;\nx": True,
                     "x;": False, "(1,\n 2);": False}


def test_formatter_shortcut_gives_what_ipythons_format_gives(kernel):
    result = evaluate(kernel, r'''
import json
from IPython.core.formatters import BaseFormatter, DisplayFormatter
ip = get_ipython()
fmt = ip.display_formatter
values = [0, 2, -7, 10**40, 2.5, float("nan"), 1j, True, False, "x", "é\n" * 3, b"y", [1, [2]],
          {"a": 1}, (1,), set(), frozenset({3}), range(3), list(range(500))]
def compare(label):
    out = []
    for value in values:
        for kwargs in ({}, {"include": ["text/plain"]}, {"exclude": ["text/html"]}):
            ours, theirs = fmt.format(value, **kwargs), DisplayFormatter.format(fmt, value, **kwargs)
            if repr(ours) != repr(theirs):
                out.append([label, repr(value)[:30], repr(ours)[:200], repr(theirs)[:200]])
    return out
differences = compare("defaults")
calls = []
html = fmt.formatters["text/html"]
html.for_type(int, lambda v: calls.append(v) or "<b>%d</b>" % v)
differences += compare("html for int")
int_html = fmt.format(5)[0].get("text/html")
html.pop(int)
html.for_type_by_name("builtins", "float", lambda v: "<i>%s</i>" % v)
float_html = fmt.format(2.5)[0].get("text/html")
differences += compare("deferred float")
html.pop(float)
fmt.formatters["text/markdown"].singleton_printers[id(True)] = lambda v: "**yes**"
true_md = fmt.format(True)[0].get("text/markdown")
differences += compare("singleton True")
del fmt.formatters["text/markdown"].singleton_printers[id(True)]
class Reprs(BaseFormatter):
    format_type = "text/x-repr"
    print_method = "__repr__"
fmt.formatters["text/x-repr"] = Reprs(parent=fmt)
custom = fmt.format([1])[0].get("text/x-repr")
differences += compare("a formatter of the user's own")
del fmt.formatters["text/x-repr"]
fmt.formatters["text/latex"].enabled = False
differences += compare("latex disabled")
fmt.formatters["text/latex"].enabled = True
json.dumps({"differences": differences, "int_html": int_html, "float_html": float_html,
            "true_md": true_md, "custom": custom, "plain": fmt.format(41)})''')
    assert result["differences"] == []
    assert result["int_html"] == "<b>5</b>" and result["float_html"] == "<i>2.5</i>"
    assert result["true_md"] == "**yes**" and result["custom"] == "[1]"
    assert result["plain"] == [{"text/plain": "41"}, {}]


def test_a_formatter_registered_for_int_reaches_the_execute_result(kernel):
    kernel.execute("get_ipython().display_formatter.formatters['text/html']"
                   ".for_type(int, lambda v: f'<b>{v}</b>')")
    try:
        data = kernel.execute("6 * 7").one("execute_result")["content"]["data"]
        assert data == {"text/plain": "42", "text/html": "<b>42</b>"}
    finally:
        kernel.execute("get_ipython().display_formatter.formatters['text/html'].pop(int)")
    data = kernel.execute("6 * 7").one("execute_result")["content"]["data"]
    assert data == {"text/plain": "42"}
