"""scripts/check-layers.sh (make layers): the rule that arrows run one way, between folders and
between the files of a folder, is found broken where it is broken, and only there.

Each test runs the script on a copy of src/ in a temporary directory, with one line planted that
breaks (or only seems to break) a rule; the repository's own files are never touched.
"""
import os
import shutil
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def tree(tmp_path):
    """A copy of the sources and the check, to plant lines in."""
    shutil.copytree(os.path.join(REPO, "src"), tmp_path / "src",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "scripts").mkdir()
    shutil.copy2(os.path.join(REPO, "scripts", "check-layers.sh"), tmp_path / "scripts")
    return tmp_path


def check(root, *args):
    result = subprocess.run([os.path.join(root, "scripts", "check-layers.sh"), *args],
                            capture_output=True, text=True, timeout=60, check=False)
    return result.returncode, result.stdout + result.stderr


def plant(root, path, text):
    """Appends `text` to src/`path`; returns the line number it starts at."""
    file = root / "src" / path
    lines = file.read_text().count("\n")
    with open(file, "a") as out:
        out.write(text)
    return lines + 1


def test_the_sources_as_they_are_keep_every_rule():
    code, output = check(REPO)
    assert code == 0, output
    assert output.strip() == "layers: every rule holds"


def test_a_call_back_up_inside_a_folder_is_a_circle_named_with_its_line(tree):
    line = plant(tree, "model/manager.c", "void planted(void) { startup_run(0); }\n")
    code, output = check(tree)
    assert code == 1
    assert "circle in src/model/:" in output
    assert f"src/model/manager.c:{line}: uses startup_run (src/model/startup.c)" in output
    assert "layers: 1 rule(s) broken" in output


def test_a_call_back_up_between_folders_is_a_circle_of_folders(tree):
    line = plant(tree, "common/log.c", "void planted(void) { http_query_integer(0); }\n")
    code, output = check(tree)
    assert code == 1
    circle = next(row for row in output.splitlines() if row.startswith("circle between folders:"))
    assert set(circle.split(": ", 1)[1].split()) == {"src/common/", "src/http/"}
    assert f"src/common/log.c:{line}: uses http_query_integer (src/http/query.c)" in output


def test_an_import_back_in_the_kernels_python_package_is_a_circle(tree):
    line = plant(tree, "runtime/python/cellbox_kernel/shell.py",
                 "\n\ndef planted():\n    from .kernel import Kernel\n    return Kernel\n")
    code, output = check(tree)
    assert code == 1
    assert "circle in src/runtime/python/cellbox_kernel/:" in output
    assert f"src/runtime/python/cellbox_kernel/shell.py:{line + 3}: imports kernel" in output


def test_a_name_in_a_comment_or_a_string_is_no_arrow(tree):
    plant(tree, "model/manager.c",
          "/* startup_run */\nstatic const char *planted = \"startup_run\"; // startup_run\n")
    code, output = check(tree)
    assert code == 0, output


def test_the_same_name_in_another_program_is_no_arrow(tree):
    # runtime/zygote.c is cellbox-kernel's, kernel/zygote.c cellboxd's: a kernel-side call of a
    # function named like a daemon-side one reaches nothing of the daemon.
    plant(tree, "runtime/zygote.c", "void planted(void) { zygote_start(0, 0, 0, 0); }\n")
    plant(tree, "kernel/zygote.c", "void planted_too(void) { zygote_main(0, 0); }\n")
    code, output = check(tree)
    assert code == 0, output


def test_warn_only_reports_the_same_and_does_not_fail(tree):
    plant(tree, "kernel/zygote.c", "void planted(void) { kernel_destroy(0); }\n")
    code, output = check(tree, "--warn-only")
    assert code == 0
    assert "circle in src/kernel/:" in output
    assert "layers: 1 rule(s) broken (reported only: --warn-only)" in output


def test_an_http_include_below_api_is_named_with_its_line(tree):
    line = plant(tree, "kernel/kernel.c", '#include "http/server.h"\n')
    code, output = check(tree)
    assert code == 1
    assert f"src/kernel/kernel.c:{line}:" in output
    assert "layers: 1 rule(s) broken" in output


def test_an_http_status_written_below_api_is_named_with_its_line(tree):
    line = plant(tree, "model/manager.c", "static int planted(int *status) { *status = 404; return 0; }\n")
    code, output = check(tree)
    assert code == 1
    assert f"src/model/manager.c:{line}:" in output
    assert "api/ picks the HTTP status" in output
