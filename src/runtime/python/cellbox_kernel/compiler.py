"""Cell file names as ipykernel gives them: /tmp/ipykernel_<pid>/<murmur2 of the code>.py.

These names show up wherever Python reports a location (warnings, inspect.getsource,
tracebacks of functions defined in cells), so matching ipykernel keeps that output the same.
Adapted from ipykernel/compiler.py (BSD-3-Clause, Copyright (c) IPython Development Team);
importing it would pull in ipykernel's ZMQ stack.
"""
import os
import tempfile

from IPython.core.compilerop import CachingCompiler

_HASH_SEED = 0xC70F6907
_M = 0x5BD1E995


def _murmur2_x86(data, seed):
    data = data.encode("utf8")
    length = len(data)
    h = seed ^ length
    rounded_end = length & 0xFFFFFFFC
    for i in range(0, rounded_end, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * _M) & 0xFFFFFFFF
        h = (h * _M) & 0xFFFFFFFF
        h ^= k
    tail = length & 0x03
    if tail:
        h ^= int.from_bytes(data[rounded_end:], "little")
        h = (h * _M) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * _M) & 0xFFFFFFFF
    h ^= h >> 15
    return h


try:
    # The same hash in C (cellbox-kernel's built-in module): ~0.15 µs a byte in Python, paid by
    # every cell before it runs. The Python one remains for a plain interpreter (tests, tools).
    from _cellbox_native import murmur2_x86 as _cell_hash
except ImportError:
    _cell_hash = _murmur2_x86


def cell_file_name(code):
    cell_name = os.environ.get("IPYKERNEL_CELL_NAME")
    if cell_name is not None:
        return cell_name
    directory = os.path.join(tempfile.gettempdir(), f"ipykernel_{os.getpid()}")
    return os.path.join(directory, f"{_cell_hash(code, _HASH_SEED)}.py")


class CellCompiler(CachingCompiler):
    def get_code_name(self, raw_code, transformed_code, number):
        return cell_file_name(raw_code)
