"""cellbox's Python kernel: IPython's InteractiveShell driven over one fd by cellboxd.

The process is single-threaded on purpose (a zygote forks it, checkpoints copy it), so nothing
here may start a thread. The wire contract is docs/kernel-protocol.md; the messages are the ones
ipykernel 6.17 sends, built without ZMQ.

Modules, in the order a request flows through them:
  main        run(fd): set up stdio, SIGINT and the shell, then serve
  channel     length-prefixed frames on the channel fd
  session     headers, message envelopes, JSON encoding
  interrupts  SIGINT -> KeyboardInterrupt only while user code runs
  kernel      the request loop: busy/idle, dispatch, stop_on_error aborts, input_request
  requests    one handler per request type (execute, complete, inspect, ...)
  shell       the InteractiveShell subclass and its display publisher / display hook
  charts      a displayed matplotlib figure as a structured chart (E2B's result.chart)
  stdio       unbuffered sys.stdout / sys.stderr on fd 1 / 2
  compiler    ipykernel's cell file names (/tmp/ipykernel_<pid>/<hash>.py)
  user_site   $HOME/.local's site-packages on sys.path, so what pip installs imports at once
"""
