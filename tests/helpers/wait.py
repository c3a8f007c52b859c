"""Deadline-based waiting: poll a condition until it holds or a deadline passes."""
import time


class Timeout(AssertionError):
    """A condition did not hold before its deadline."""


def wait_until(condition, timeout=30.0, interval=0.05, message=None):
    """Call condition() until it returns a truthy value; return that value.

    Raises Timeout (an AssertionError, so pytest reports it as a failure) naming what was
    awaited and the last value seen.
    """
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = condition()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise Timeout(f"timed out after {timeout}s waiting for {message or condition}; last value: {last!r}")
        time.sleep(interval)
