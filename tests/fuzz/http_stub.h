/* http_stub — http/server.h without libmicrohttpd, for the fuzzers that drive the API modules.
 *
 * The harnesses link every daemon module except src/http/server.c and build requests here from
 * the fuzzer's bytes: method, path and query arguments (decoded as libmicrohttpd decodes them),
 * headers and a body. The stub answers the way server.c does, and checks what server.c only
 * logs: exactly one response per request (a second one, or none, aborts: the fuzzer reports it).
 *
 * Creating a sandbox is replaced too (the fuzz binaries are linked with --wrap): manager_create
 * still reads the request's limits and environment (limits_from_request), then fails with 503,
 * and stateless_run_start fails with 503, so every request is parsed, checked and routed as the
 * daemon does without starting a process. */
#ifndef CELLBOX_FUZZ_HTTP_STUB_H
#define CELLBOX_FUZZ_HTTP_STUB_H

#include <stddef.h>

#include "http/server.h"

/* Once per process: the modules' init, with the built-in kernelspec and a template "data" (no
   manager, no zygote: nothing is started). */
void stub_init(void);

/* A request from the text of an HTTP/1.1 request ("GET /path?query HTTP/1.1\r\nName: value\r\n
   \r\nbody"; bare "\n" line ends too). NULL when the text has no request line. */
http_request *stub_request_parse(const unsigned char *data, size_t size);
void stub_request_add_header(http_request *request, const char *name, const char *value);
/* Dispatches it as server.c does (routes_dispatch; a streamed body goes to its receiver). */
void stub_request_run(http_request *request);
/* The connection is done: streams are closed (not completed unless ended), then it is freed. */
void stub_request_finish(http_request *request);

int stub_response_status(const http_request *request);
const char *stub_response_header(const http_request *request, const char *name);

#endif
