"""Entry point: cellbox-kernel (src/runtime/kernel_main.c) calls run(channel_fd).

Everything here is per kernel process: a zygote can import this module (and IPython, numpy,
...) once and call run() in each forked child.
"""
import os

from . import stdio
from .channel import Channel, ChannelClosed
from .interrupts import InterruptGate
from .kernel import Kernel
from .shell import use_interruptible_pdb


def run(channel_fd):
    """Serve requests on `channel_fd` until shutdown; returns the process exit status."""
    # As ipykernel: figures render inline unless the user chose a backend. Set before anything
    # imports matplotlib.
    if not os.environ.get("MPLBACKEND"):
        os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    stdio.install()
    use_interruptible_pdb()
    gate = InterruptGate()
    gate.install()
    kernel = Kernel(Channel(channel_fd, gate), gate)
    try:
        kernel.start()
        return kernel.serve()
    except ChannelClosed:
        return 0  # the daemon hung up: nobody is left to talk to
