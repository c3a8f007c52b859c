"""Shared helpers for cellbox's integration and real-client test suites.

- daemon.py  starts/stops a cellboxd (or, for checking the tests themselves, a reference
             Jupyter Server) on a free port with its own token and temp data dir.
- wire.py    Jupyter message construction and the two WebSocket framings (legacy JSON and
             v1.kernel.websocket.jupyter.org), written here from the protocol description.
- client.py  a small REST + WebSocket client built on requests and websocket-client.
- environment.py  the environment of the test session and of what it starts, whatever the
             caller exported.
- wait.py    deadline-based polling (tests never sleep to assert timing).
"""
