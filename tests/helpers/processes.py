"""Processes on the host, named by pid and start time: a pid alone can be reused by the time a
test looks again."""


def start_time(pid):
    """A process's start time (field 22 of /proc/PID/stat, in clock ticks since boot), or None
    once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None
