"""Wheels built by hand for the tests of pip in a sandbox (no setuptools, no network).

build_wheel(package, version, greeting, command, pth_line=None) -> bytes of `wheel_name(package, version)`:
a pure-Python wheel whose module holds GREETING and a main() that prints it, with `command` as
its console script, and METADATA, WHEEL and RECORD (each file's hash) as the wheel format asks.
"""
import base64
import hashlib
import io
import zipfile


def wheel_name(package, version):
    return f"{package}-{version}-py3-none-any.whl"


def build_wheel(package, version, greeting, command, pth_line=None):
    """`pth_line`, if given, is the one line of a `<package>.pth` beside the package (as
    setuptools and editable installs put there: a path, or `import ...` run at startup)."""
    dist_info = f"{package}-{version}.dist-info"
    files = {
        f"{package}/__init__.py": f"GREETING = {greeting!r}\n\n\ndef main():\n    print(GREETING)\n",
        f"{dist_info}/entry_points.txt": f"[console_scripts]\n{command} = {package}:main\n",
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": ("Wheel-Version: 1.0\nGenerator: cellbox-test\n"
                               "Root-Is-Purelib: true\nTag: py3-none-any\n"),
    }
    if pth_line is not None:
        files[f"{package}.pth"] = pth_line + "\n"
    record = ""
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record += f"{path},sha256={digest.decode()},{len(text.encode())}\n"
    files[f"{dist_info}/RECORD"] = record + f"{dist_info}/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)
    return buffer.getvalue()
