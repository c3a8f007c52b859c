"""The sandbox must not get in the way of ordinary data work: pandas, numpy, matplotlib,
files in /workspace (visible on the host), subprocesses and `!` commands, /tmp, the standard
library, threads and multiprocessing, sqlite, TLS contexts."""
import base64
import os

import pytest

pytestmark = pytest.mark.cellbox_only


@pytest.fixture(scope="module")
def worker(box):
    return box.kernel()


def test_pandas_dataframe_renders_html(box, worker):
    cell = worker.ok("""
import pandas as pd
df = pd.DataFrame({'city': ['Oslo', 'Lima', 'Pune'], 'temp': [3.5, 19.0, 27.25]})
df
""")
    data = cell.displays[-1]["data"]
    assert "text/html" in data and "<table" in data["text/html"] and "Lima" in data["text/html"], data
    assert "text/plain" in data and "27.25" in data["text/plain"]
    box.assert_contained()


def test_numpy_computation(box, worker):
    got = worker.json("""
import numpy as np
rng = np.random.default_rng(0)
a = rng.standard_normal((200, 200))
_result = {'det_sign': float(np.sign(np.linalg.det(a @ a.T + np.eye(200)))),
           'sum': int(np.arange(1000).sum()), 'fft': float(abs(np.fft.fft(np.ones(8))[0]))}
""")
    assert got == {"det_sign": 1.0, "sum": 499500, "fft": 8.0}
    box.assert_contained()


def test_matplotlib_figure_is_png_display_data(box, worker):
    cell = worker.ok("""
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(3, 2))
ax.plot([1, 2, 3], [3, 1, 2])
plt.show()
""", timeout=120)
    pngs = [m["content"]["data"]["image/png"] for m in cell.messages
            if m["msg_type"] == "display_data" and "image/png" in m["content"]["data"]]
    assert pngs, cell.describe()
    assert base64.b64decode(pngs[0])[:8] == b"\x89PNG\r\n\x1a\n"
    box.assert_contained()


def test_workspace_files_read_write_and_visible_on_host(box, worker):
    worker.ok("""
import os
os.makedirs('results', exist_ok=True)
with open('results/table.csv', 'w') as f:
    f.write('a,b\\n1,2\\n')
""")
    host_path = os.path.join(worker.workspace, "results", "table.csv")
    with open(host_path) as f:
        assert f.read() == "a,b\n1,2\n"
    assert os.stat(host_path).st_uid == worker.uid
    # and the other way: a file the host puts there is readable inside
    with open(os.path.join(worker.workspace, "input.txt"), "w") as f:
        f.write("from the host")
    got = worker.json("import os\n_result = [os.getcwd(), open('input.txt').read(), open('/workspace/results/table.csv').read()]")
    assert got == ["/workspace", "from the host", "a,b\n1,2\n"]
    box.assert_contained()


def test_subprocess_and_bang_commands(box, worker):
    worker.ok("open('/workspace/listed.txt', 'w').write('x')")
    got = worker.json("""
import subprocess
r = subprocess.run(['ls'], capture_output=True, text=True)
_result = [r.returncode, r.stdout.split()]
""")
    assert got[0] == 0 and "listed.txt" in got[1], got
    cell = worker.ok("!ls")
    assert "listed.txt" in cell.stdout, cell.describe()
    cell = worker.ok("!echo $HOME; id -un; hostname")
    assert cell.stdout.split() == ["/home/user", "user", "cellbox"], cell.stdout  # HOME: the workspace
    box.assert_contained()


def test_tmp_and_dev_shm_writable(box, worker):
    got = worker.json("""
import os, tempfile
with tempfile.NamedTemporaryFile('w', delete=False) as f:
    f.write('tmp ok')
with open('/dev/shm/x', 'w') as g:
    g.write('shm ok')
_result = [f.name.startswith('/tmp/'), open(f.name).read(), open('/dev/shm/x').read()]
os.remove(f.name); os.remove('/dev/shm/x')
""")
    assert got == [True, "tmp ok", "shm ok"]
    box.assert_contained()


def test_most_stdlib_imports(box, worker):
    got = worker.json("""
import importlib
names = ['asyncio', 'base64', 'bz2', 'calendar', 'collections', 'concurrent.futures', 'contextlib',
         'csv', 'ctypes', 'dataclasses', 'datetime', 'decimal', 'difflib', 'email', 'enum', 'fractions',
         'functools', 'glob', 'gzip', 'hashlib', 'heapq', 'hmac', 'html', 'http.client', 'http.server',
         'importlib.metadata', 'inspect', 'io', 'itertools', 'json', 'logging', 'lzma', 'math',
         'mimetypes', 'multiprocessing', 'operator', 'pathlib', 'pickle', 'platform', 'pprint',
         'queue', 'random', 're', 'secrets', 'select', 'shelve', 'shutil', 'signal', 'socket',
         'sqlite3', 'ssl', 'statistics', 'string', 'struct', 'subprocess', 'tarfile', 'tempfile',
         'textwrap', 'threading', 'time', 'timeit', 'traceback', 'typing', 'unicodedata', 'unittest',
         'urllib.parse', 'urllib.request', 'uuid', 'venv', 'wave', 'weakref', 'xml.etree.ElementTree',
         'zipfile', 'zlib', 'zoneinfo']
failed = {}
for n in names:
    try:
        importlib.import_module(n)
    except Exception as e:
        failed[n] = repr(e)
_result = failed
""")
    assert got == {}, f"stdlib modules fail to import in the sandbox: {got}"
    box.assert_contained()


def test_threads_multiprocessing_and_sqlite(box, worker):
    got = worker.json("""
import multiprocessing as mp, sqlite3, threading, concurrent.futures as cf
with mp.get_context('fork').Pool(2) as pool:
    squares = pool.map(abs, [-1, -2, -3])
with cf.ThreadPoolExecutor(4) as ex:
    doubled = list(ex.map(lambda x: 2 * x, range(5)))
db = sqlite3.connect('/workspace/data.db')
db.execute('create table t (x)'); db.executemany('insert into t values (?)', [(i,) for i in range(10)])
db.commit()
total = db.execute('select sum(x) from t').fetchone()[0]
db.close()
_result = [squares, doubled, total]
""", timeout=120)
    assert got == [[1, 2, 3], [0, 2, 4, 6, 8], 45]
    box.assert_contained()


def test_tls_context_and_locale(box, worker):
    got = worker.json("""
import ssl, locale, sys
ctx = ssl.create_default_context()
_result = [ctx.cert_store_stats()['x509_ca'] > 0, sys.getfilesystemencoding(), '\\u00e9t\\u00e9'.upper()]
""")
    assert got == [True, "utf-8", "ÉTÉ"], got
    box.assert_contained()


def test_large_but_allowed_work_fits(box, fresh):
    """Work well inside the limits: 200 MB of numpy in a 1 GiB sandbox, 20 MB written to
    /workspace, a few hundred files, 50 threads."""
    k = fresh()
    got = k.json("""
import numpy as np, os, threading
a = np.ones((25, 1000, 1000))  # 200 MB
with open('/workspace/blob', 'wb') as f:
    f.write(os.urandom(20 << 20))
os.makedirs('/workspace/many', exist_ok=True)
for i in range(300):
    open(f'/workspace/many/{i}.txt', 'w').write(str(i))
ev = threading.Event(); ts = [threading.Thread(target=ev.wait) for _ in range(50)]
[t.start() for t in ts]; ev.set(); [t.join() for t in ts]
_result = [float(a.sum()), os.path.getsize('/workspace/blob'), len(os.listdir('/workspace/many'))]
del a
""", timeout=120)
    assert got == [25e6, 20 << 20, 300]
    box.assert_contained()
