"""input() and getpass() during a cell, forwarded to the frontend as ipykernel does
(ipkernel._forward_input, kernelbase.raw_input / getpass)."""
import builtins
import contextlib
import getpass
import warnings

from IPython.core.error import StdinNotImplementedError


class InputForwarder:
    def __init__(self, kernel):
        self._kernel = kernel
        self._allow_stdin = False

    @contextlib.contextmanager
    def forwarding(self, allow_stdin):
        """input/getpass go to the frontend while a cell runs, and are restored after it."""
        self._allow_stdin = allow_stdin
        saved_input, saved_getpass = builtins.input, getpass.getpass
        builtins.input, getpass.getpass = self.raw_input, self.getpass
        try:
            yield
        finally:
            builtins.input, getpass.getpass = saved_input, saved_getpass

    def raw_input(self, prompt=""):
        if not self._allow_stdin:
            raise StdinNotImplementedError(
                "raw_input was called, but this frontend does not support input requests.")
        return self._kernel.request_input(str(prompt), password=False)

    def getpass(self, prompt="", stream=None):
        if not self._allow_stdin:
            raise StdinNotImplementedError(
                "getpass was called, but this frontend does not support input requests.")
        if stream is not None:
            warnings.warn("The `stream` parameter of `getpass.getpass` will have no effect "
                          "when using ipykernel", UserWarning, stacklevel=2)
        return self._kernel.request_input(prompt, password=True)
