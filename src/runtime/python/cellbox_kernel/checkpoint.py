"""The daemon's "checkpoint" frame: stop at the checkpoint point (src/runtime/checkpoint_point.c).

The C function records what only this process can see, saves its registers, says
"checkpoint_ready" and waits while the daemon reads this process's memory, then returns
"goes_on". The same call returns "restored" a second time in a restored copy in another sandbox:
that copy says "restored" with what it reopened and what it could not carry, then idle, and
serves its new channel (same fd number) as if nothing happened.
"""
import json

import _cellbox_native

from . import stdio
from .session import encode


def take(kernel):
    """Handle {"channel": "cellbox", "type": "checkpoint"} (the kernel is idle)."""
    stdio.flush()  # output written before the image belongs to the original only
    outcome, text = _cellbox_native.checkpoint_point(kernel.channel.fd)
    if outcome == "refused":
        kernel.channel.send(encode({"channel": "cellbox", "type": "checkpoint_refused",
                                    "why": text}))
    elif outcome == "goes_on":
        if text:  # a frame the daemon sent instead of "checkpoint_done": handled next
            kernel.channel.put_back(text.encode("utf-8"))
    else:
        kernel.channel.send(encode({"channel": "cellbox", "type": "restored",
                                    "report": json.loads(text)}))
        kernel.send("iopub", "status", {"execution_state": "idle"}, parent=None)
