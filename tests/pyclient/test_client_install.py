"""The package installs offline with Debian's pip and setuptools (no build isolation, no
index) and works from where it was installed; and it imports from the tree."""
import os
import shutil
import subprocess
import sys

import pytest

# Not `from conftest import ...`: with several suites in one run, "conftest" may be another
# directory's module.
CLIENT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

SYSTEM_PYTHON = "/usr/bin/python3"


def _has_pip():
    return subprocess.run([SYSTEM_PYTHON, "-m", "pip", "--version"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _has_pip(), reason="python3-pip is not installed (apt-get install python3-pip)")
def test_pip_install_target(tmp_path, conn):
    # A copy, so that setuptools' build/ and egg-info stay out of the tree.
    source = tmp_path / "src"
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp_path / "target"
    install = subprocess.run([SYSTEM_PYTHON, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                              "--no-deps", "--disable-pip-version-check", "--no-cache-dir",
                              "--target", str(target), str(source)],
                             capture_output=True, text=True, timeout=120)
    assert install.returncode == 0, install.stdout + install.stderr
    installed = {p.name for p in target.iterdir()}
    assert "cellbox" in installed and any(n.startswith("cellbox-0.1.0") and n.endswith(".dist-info") for n in installed)
    assert (target / "cellbox" / "adapters" / "openai.py").is_file()

    script = ("import cellbox, cellbox.aio, cellbox.adapters.autogen, cellbox.adapters.langchain, "
              "cellbox.adapters.openai\n"
              "print(cellbox.__file__)\n"
              "with cellbox.Sandbox.create() as sb:\n"
              "    print(sb.run_code('6 * 7').text)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(PYTHONPATH=str(target), CELLBOX_URL=conn["url"], CELLBOX_TOKEN=conn["token"])
    run = subprocess.run([SYSTEM_PYTHON, "-c", script], capture_output=True, text=True, cwd=str(tmp_path),
                         env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    where, answer = run.stdout.split()
    assert where == str(target / "cellbox" / "__init__.py") and answer == "42"


def test_imports_from_the_tree(tmp_path):
    code = f"import sys; sys.path.insert(0, {CLIENT!r}); import cellbox, cellbox.aio, cellbox.adapters; print(cellbox.__file__)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(tmp_path), timeout=30)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == os.path.join(CLIENT, "cellbox", "__init__.py")
