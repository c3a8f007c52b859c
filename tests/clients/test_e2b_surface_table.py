"""docs/api.md's "Every SDK method and its state" names every public method of the npm SDKs the
client tests install (tests/clients/node: `e2b` and `@e2b/code-interpreter`), read from their
type declarations, so an SDK upgrade that adds a method fails here until the table says what
cellbox does with it. (The states themselves are the SDK tests' business.)"""
import os
import re

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = os.path.join(HERE, "node", "node_modules")
API_MD = os.path.join(HERE, "..", "..", "docs", "api.md")

# The SDK classes a user calls, and whether only their static methods count (Template's instance
# methods are its local builder: the table names them as a group).
CLASSES = {
    "e2b": {"Sandbox": False, "SandboxApi": True, "Filesystem": False, "Commands": False, "CommandHandle": False,
            "Pty": False, "WatchHandle": False, "Git": False, "Volume": False, "Secret": False,
            "TemplateBase": True, "SandboxPaginator": False, "SnapshotPaginator": False,
            "SecretPaginator": False, "Paginator": False},
    "@e2b/code-interpreter": {"Sandbox": False},
}
_CLASS = re.compile(r"^(?:export )?declare (?:abstract )?class (\w+)")
_METHOD = re.compile(r"^  ((?:(?:static|get|async|readonly) )*)(\w+)(?:<[^>]*>)?\(")


def public_methods(package, wanted):
    """{class: {method, ...}} of the package's index.d.ts: methods and getters at the class's
    top level, not private, protected, @hidden or the constructor."""
    path = os.path.join(MODULES, package, "dist", "index.d.ts")
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing: run `scripts/install-deps.sh test` (npm ci in tests/clients/node)")
    methods, current, depth, hidden = {}, None, 0, False
    for line in open(path, encoding="utf-8"):
        found = _CLASS.match(line)
        if found and depth == 0:
            current = found.group(1) if found.group(1) in wanted else None
        if "@hidden" in line or "@internal" in line:
            hidden = True
        if current and depth == 1:
            method = _METHOD.match(line)
            if method:
                if method.group(2) != "constructor" and not hidden and \
                        (not wanted[current] or "static" in method.group(1)):
                    methods.setdefault(current, set()).add(method.group(2))
                hidden = False
        depth += line.count("{") - line.count("}")
        if depth <= 0:
            current, depth = None, 0
    return methods


def the_table():
    text = open(API_MD, encoding="utf-8").read()
    start = text.index("### Every SDK method and its state")
    end = text.index("\n## ", start)
    return text[start:end]


@pytest.mark.parametrize("package", sorted(CLASSES))
def test_every_public_method_is_in_the_table(package):
    table = the_table()
    methods = public_methods(package, CLASSES[package])
    assert set(methods) == set(CLASSES[package]), f"classes not found in {package}: " \
                                                   f"{set(CLASSES[package]) - set(methods)}"
    missing = sorted(f"{cls}.{name}" for cls, names in methods.items() for name in names
                     if not re.search(rf"\b{re.escape(name)}\b", table))
    assert missing == [], f"docs/api.md's E2B method table does not name: {missing}"


def test_every_row_has_a_state():
    rows = [line for line in the_table().splitlines() if line.startswith("| ") and not line.startswith("| **")]
    states = [row.rstrip(" |").rsplit(" | ", 1)[-1] for row in rows[2:]]     # after the header rows
    assert states and all(s.startswith(("works", "issue 20: in progress (", "not supported by cellbox: ", "local",
                                         "as each class")) for s in states), states
