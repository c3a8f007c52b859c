"""The one library every suite starts servers and clients with (tests/README.md shows the layout).

- daemon.py  starts/stops a cellboxd (or, for checking the tests themselves, a reference
             Jupyter Server) on a free port with its own token and temp data dir, stopped by pid;
             serve()/finish_or_fail() for fixtures; run_daemon_to_exit() for refusals; the
             built binaries (daemon_binary, cli_binary, built); serving_in_thread() for an
             in-process stand-in HTTP server.
- client.py  the Jupyter API's client: REST through requests, kernels' channels through
             websocket-client (Client, KernelWS, ExecResult).
- v1.py      the native API's client (V1: sandboxes, NDJSON execution and command streams, files).
- rawhttp.py raw HTTP and WebSocket over a socket, for what the clients cannot send or show.
- wire.py    Jupyter message construction and the two WebSocket framings (legacy JSON and
             v1.kernel.websocket.jupyter.org), written here from the protocol description.
- asserts.py assertions shared by the suites (error bodies, kernel models, headers).
- wait.py    deadline-based polling (tests never sleep to assert timing).
- environment.py  the environment of the test session and of what it starts, whatever the
             caller exported.
- processes.py  a process named by pid and start time (a pid alone may be reused).
- snippets.py, hugetlb.py  cell code that waits for a file; the host's hugetlb pool.
- languages.py  each non-Python language's cells (JavaScript, TypeScript, Bash, R: state, output,
             errors, interrupt, death) for the suites that run every language alike.
- outside_host.py  an outside host for network tests: a network namespace of the test's own on
             a /29 of 203.0.113.0/24, joined by a veth, optionally serving files over HTTP.
- test_internet.py  the tests' own small internet (root): web server, DNS server and package
             index in a namespace on documentation addresses, and a stand-in sandbox namespace
             (small_internet(), stand_in_sandbox(); tests/README.md).
- network_ranges.py  a --network-range of the test run's own for each daemon it starts
             (sandbox_range), or one no route on the host touches (unrouted_range): cellboxd
             refuses a range another daemon's routes or gateway lie in.
- dns_query.py  one DNS query over UDP, on the host, in a namespace or in a cell.
"""
