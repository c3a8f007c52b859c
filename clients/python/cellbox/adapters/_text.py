"""What a model reads back from a cell: its output, the value of its last expression, a word
for each image, and the error with its traceback, cut to a size a context window can take."""
from ..models import strip_ansi

MAX_CHARS = 8000


def shorten(text, max_chars=MAX_CHARS):
    """`text`, or its head and tail with the middle dropped (and said so)."""
    if max_chars is None or len(text) <= max_chars:
        return text
    head = max_chars * 2 // 3
    tail = max_chars - head
    return f"{text[:head]}\n... [{len(text) - head - tail} characters cut] ...\n{text[-tail:]}"


def execution_text(execution, max_chars=MAX_CHARS):
    """stdout, stderr, the results (main result text; "[image/png displayed]" for charts)
    and the error ("Traceback ... ZeroDivisionError: division by zero"), in that order."""
    parts = []
    stdout, stderr = "".join(execution.logs.stdout), "".join(execution.logs.stderr)
    if stdout.strip():
        parts.append(stdout.rstrip("\n"))
    if stderr.strip():
        parts.append("[stderr]\n" + stderr.rstrip("\n"))
    for result in execution.results:
        images = [f for f in ("png", "jpeg", "svg", "pdf") if getattr(result, f) is not None]
        if images:
            parts.append(f"[image/{images[0]} displayed]")
        elif result.text is not None and (result.is_main_result or result.text.strip()):
            parts.append(result.text)
        elif result.html is not None:
            parts.append("[text/html displayed]")
    if execution.error is not None:
        trace = strip_ansi(execution.error.traceback).strip()
        summary = f"{execution.error.name}: {execution.error.value}"
        if not trace:
            parts.append(f"Error: {summary}")
        elif summary in trace:
            parts.append(f"Error:\n{trace}")
        else:
            parts.append(f"Error: {summary}\n{trace}")
    text = "\n".join(parts) if parts else "(the code ran without output)"
    return shorten(text, max_chars)
