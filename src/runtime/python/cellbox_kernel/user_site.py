"""The user's site-packages ($HOME/.local/lib/python3.X/site-packages) on a kernel's sys.path,
so what pip installs in the sandbox imports at once, without restarting the kernel.

pip in a sandbox installs there (/usr is read-only; sandbox/rootfs.c writes its pip.conf).
Python's own startup would not do: a zygote's kernel inherits the zygote's sys.path, made
outside the sandbox under another HOME, and Python adds the user site only if the directory
already exists, while it usually appears with the first `pip install`, after the kernel started.
"""
import os
import site
import sys
from importlib.machinery import (BYTECODE_SUFFIXES, EXTENSION_SUFFIXES, SOURCE_SUFFIXES,
                                 ExtensionFileLoader, FileFinder, SourceFileLoader,
                                 SourcelessFileLoader)

_LOADERS = ((ExtensionFileLoader, EXTENSION_SUFFIXES), (SourceFileLoader, SOURCE_SUFFIXES),
            (SourcelessFileLoader, BYTECODE_SUFFIXES))


class _UserSiteFinder(FileFinder):
    """FileFinder for a directory that may not exist yet. Python's path hook refuses such a
    directory, and sys.path_importer_cache then remembers the refusal for good; a FileFinder
    made directly reads the directory again whenever its mtime changes, creation included.
    The .pth files pip puts there run once each, as at startup."""

    def __init__(self, path):
        super().__init__(path, *_LOADERS)
        self._seen_pth = set()
        self._pth_mtime = None

    def find_spec(self, fullname, target=None):
        self._run_new_pth_files()
        return super().find_spec(fullname, target)

    def _run_new_pth_files(self):
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError:
            return
        if mtime == self._pth_mtime:
            return
        self._pth_mtime = mtime
        try:
            names = sorted(n for n in os.listdir(self.path)
                           if n.endswith(".pth") and not n.startswith(".") and n not in self._seen_pth)
        except OSError:
            return
        known = {os.path.normcase(p) for p in sys.path if isinstance(p, str)}
        for name in names:
            self._seen_pth.add(name)
            site.addpackage(self.path, name, known)


def enable():
    """Puts this process's user site on sys.path, before the system's site-packages as Python
    does, whether or not it exists yet. Called once as the kernel starts (HOME is the
    sandbox's by then)."""
    stale = site.USER_SITE  # the zygote's, under its own HOME, or None
    site.USER_BASE = site.USER_SITE = None  # worked out again from this process's HOME
    user_site = site.getusersitepackages()
    if stale and stale != user_site and stale in sys.path:
        sys.path.remove(stale)
    if not site.ENABLE_USER_SITE or user_site in sys.path:
        return
    index = len(sys.path)
    for i, path in enumerate(sys.path):
        if os.path.basename(path) in ("site-packages", "dist-packages"):
            index = i
            break
    sys.path.insert(index, user_site)

    def finder_for_user_site(path):
        if path != user_site:
            raise ImportError("not the user site", path=path)
        return _UserSiteFinder(path)

    sys.path_hooks.insert(0, finder_for_user_site)
    sys.path_importer_cache.pop(user_site, None)
