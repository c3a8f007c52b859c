/* cellbox mcp: the Model Context Protocol over stdio, bridged to cellboxd's /mcp endpoint.
 *
 * MCP hosts (desktop agents, the SDKs' stdio client transports) start a server as a subprocess
 * and speak JSON-RPC over its stdin and stdout, one message a line. This command is that
 * subprocess: each message read from stdin is POSTed to $CELLBOX_URL/mcp (the streamable HTTP
 * transport) and the daemon's answer is written to stdout as one line. One message at a time: a
 * host waits for its answers anyway, and the daemon does the work.
 *
 * stdout carries JSON-RPC and nothing else (a stray line would break the host's parser), so
 * every diagnostic goes to stderr, and a request the daemon could not answer still gets a
 * JSON-RPC error so that the host is not left waiting. At the end of stdin the session is ended
 * (DELETE /mcp), which deletes the sandbox the daemon made for it; so it is on SIGTERM, SIGINT
 * and SIGHUP, which hosts send when a call takes too long to wind down after they close stdin. */
#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/version.h"

#define USER_AGENT "cellbox/" CELLBOX_VERSION
#define PARSE_ERROR -32700     /* JSON-RPC: the line is not JSON */
#define TRANSPORT_ERROR -32000 /* JSON-RPC: a server error of the implementation's own */

static const char mcp_usage[] =
    "usage: cellbox mcp\n"
    "\n"
    "Serves the Model Context Protocol on stdin and stdout (one JSON-RPC message a line) for\n"
    "MCP hosts that start their servers as subprocesses, by passing each message on to\n"
    "cellboxd's /mcp endpoint. Its tools run Python and shell commands in sandboxes, read and\n"
    "write their files, and create, pause, resume and delete them. Diagnostics go to stderr.\n"
    "At the end of stdin the session ends and the sandbox it made is deleted.\n"
    "\n"
    "In a host's configuration, for example:\n"
    "  {\"command\": \"cellbox\", \"args\": [\"mcp\"],\n"
    "   \"env\": {\"CELLBOX_URL\": \"http://127.0.0.1:8888\", \"CELLBOX_TOKEN\": \"...\"}}\n";

/* What the bridge keeps from one message to the next. */
typedef struct bridge {
    CURL *http;        /* one handle: every request reuses its connection */
    char *endpoint;    /* "<base URL>/mcp" */
    char session[128]; /* the Mcp-Session-Id initialize gave; "" before */
    char protocol[32]; /* the version initialize agreed on, sent as MCP-Protocol-Version */
} bridge;

/* The daemon's answer to one request. */
typedef struct answer {
    long status;                 /* HTTP status; 0 when none arrived */
    bool event_stream;           /* Content-Type: text/event-stream */
    char session[128];           /* its Mcp-Session-Id header; "" when none */
    char *body;                  /* the whole body, NUL-terminated */
    size_t body_length;          /* bytes in body */
    char error[CURL_ERROR_SIZE]; /* libcurl's words for a failed transfer */
} answer;

/* Set by SIGTERM, SIGINT and SIGHUP: stop waiting for stdin or the daemon, end the session. */
static volatile sig_atomic_t stopping;

static void on_stop_signal(int signal_number)
{
    (void)signal_number;
    stopping = 1;
}

/* No SA_RESTART: a getline waiting on stdin returns at once. */
static void catch_stop_signals(void)
{
    struct sigaction action = {.sa_handler = on_stop_signal};
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGHUP, &action, NULL);
}

/* ---- HTTP ---- */

static size_t on_header(char *data, size_t size, size_t count, void *userdata)
{
    answer *a = userdata;
    size_t length = size * count;
    static const char name[] = "mcp-session-id:";
    size_t name_length = sizeof name - 1;
    if (length <= name_length || strncasecmp(data, name, name_length))
        return length;
    const char *value = data + name_length;
    size_t value_length = length - name_length;
    while (value_length && (*value == ' ' || *value == '\t'))
        value++, value_length--;
    while (value_length && strchr(" \t\r\n", value[value_length - 1]))
        value_length--;
    if (value_length < sizeof a->session)
        snprintf(a->session, sizeof a->session, "%.*s", (int)value_length, value);
    return length;
}

/* libcurl asks at least once a second: a non-zero answer abandons a call in flight (the daemon
   then stops its work). */
static int on_progress(void *userdata, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)userdata, (void)a, (void)b, (void)c, (void)d;
    return stopping;
}

/* Sends `method` (POST with `body`, or DELETE) to /mcp with the token, the session and the
   protocol version; the answer, whatever its status, lands in *a (free its body). A POST stops
   when a stop signal comes; a DELETE, sent on the way out, gets ten seconds. */
static CURLcode send_request(bridge *b, const char *method, const char *body, answer *a)
{
    memset(a, 0, sizeof *a);
    FILE *sink = open_memstream(&a->body, &a->body_length);
    if (!sink) {
        output_error("out of memory for cellboxd's answer");
        exit(EXIT_FAILED);
    }
    curl_easy_reset(b->http);
    curl_easy_setopt(b->http, CURLOPT_URL, b->endpoint);
    curl_easy_setopt(b->http, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(b->http, CURLOPT_USERAGENT, USER_AGENT);
    curl_easy_setopt(b->http, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(b->http, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(b->http, CURLOPT_ERRORBUFFER, a->error);
    curl_easy_setopt(b->http, CURLOPT_WRITEDATA, sink); /* libcurl's default writer: fwrite */
    curl_easy_setopt(b->http, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(b->http, CURLOPT_HEADERDATA, a);
    if (body) {
        curl_easy_setopt(b->http, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(b->http, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
        curl_easy_setopt(b->http, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(b->http, CURLOPT_XFERINFOFUNCTION, on_progress);
    } else {
        curl_easy_setopt(b->http, CURLOPT_TIMEOUT, 10L);
    }
    struct curl_slist *headers = NULL;
    char session[160], protocol[64];
    if (client_authorization_header())
        headers = curl_slist_append(headers, client_authorization_header());
    if (body)
        headers = curl_slist_append(headers, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Accept: application/json, text/event-stream");
    if (b->session[0]) {
        snprintf(session, sizeof session, "Mcp-Session-Id: %s", b->session);
        headers = curl_slist_append(headers, session);
    }
    if (b->protocol[0]) {
        snprintf(protocol, sizeof protocol, "MCP-Protocol-Version: %s", b->protocol);
        headers = curl_slist_append(headers, protocol);
    }
    headers = curl_slist_append(headers, "Expect:");
    curl_easy_setopt(b->http, CURLOPT_HTTPHEADER, headers);
    CURLcode code = curl_easy_perform(b->http);
    curl_slist_free_all(headers);
    fclose(sink);
    curl_easy_getinfo(b->http, CURLINFO_RESPONSE_CODE, &a->status);
    const char *type = NULL;
    curl_easy_getinfo(b->http, CURLINFO_CONTENT_TYPE, &type);
    a->event_stream = type && !strncasecmp(type, "text/event-stream", 17);
    return code;
}

/* ---- stdout ---- */

/* One message, one line (compact JSON escapes every newline). False when stdout is gone. */
static bool write_message(json_t *message)
{
    char *text = json_dumps(message, JSON_COMPACT);
    bool written = text && fputs(text, stdout) >= 0 && putchar('\n') != EOF && fflush(stdout) == 0;
    free(text);
    return written;
}

static bool write_error(json_t *id, int code, const char *message)
{
    json_t *response = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
                                 id ? id : json_null(), "error", "code", code, "message", message);
    bool written = write_message(response);
    json_decref(response);
    return written;
}

/* ---- one message ---- */

/* The id of a request (a message with a method and an id): what an answer must carry. NULL for
   notifications and for the host's responses to the server, which get no answer. */
static json_t *request_id(json_t *message)
{
    if (!json_string_value(json_object_get(message, "method")))
        return NULL;
    return json_object_get(message, "id");
}

static bool is_jsonrpc(json_t *reply)
{
    const char *version = json_string_value(json_object_get(reply, "jsonrpc"));
    return version && !strcmp(version, "2.0");
}

/* The daemon could not answer `message` in JSON-RPC: says why on stderr and, for a request, to
   the host as well. */
static bool report_failure(json_t *message, const char *why)
{
    output_error("%s", why);
    json_t *id = request_id(message);
    return id ? write_error(id, TRANSPORT_ERROR, why) : true;
}

static bool report_unreachable(bridge *b, json_t *message, answer *a, CURLcode code)
{
    char why[CURL_ERROR_SIZE + 512];
    const char *detail = a->error[0] ? a->error : curl_easy_strerror(code);
    if (!a->status)
        snprintf(why, sizeof why,
                 "cannot reach cellboxd at %s: %s; start it (`make run`) or set "
                 "CELLBOX_URL to where it listens",
                 b->endpoint, detail);
    else
        snprintf(why, sizeof why,
                 "the connection to cellboxd at %s broke: %s; is the daemon "
                 "still running? (see its log)",
                 b->endpoint, detail);
    return report_failure(message, why);
}

/* An answer that is not JSON-RPC: an HTTP error from outside MCP (the token, a daemon without
   /mcp). `reply` is its decoded body, if it was JSON. */
static bool report_refusal(bridge *b, json_t *message, answer *a, json_t *reply)
{
    const char *said = json_string_value(json_object_get(reply, "message"));
    const char *hint = a->status == 401 || a->status == 403
                           ? "set CELLBOX_TOKEN (or --token) to the daemon's token"
                       : a->status == 404 ? "this cellboxd has no /mcp endpoint: upgrade it"
                                          : "see cellboxd's log";
    char why[1024];
    snprintf(why, sizeof why, "cellboxd at %s answered HTTP %ld%s%.300s; %s", b->endpoint,
             a->status, said ? ": " : " without a JSON-RPC message", said ? said : "", hint);
    return report_failure(message, why);
}

/* Passes one JSON-RPC message from the daemon on to the host, keeping what initialize agreed. */
static bool relay_reply(bridge *b, json_t *message, json_t *reply)
{
    const char *method = json_string_value(json_object_get(message, "method"));
    const char *version =
        json_string_value(json_object_get(json_object_get(reply, "result"), "protocolVersion"));
    if (method && !strcmp(method, "initialize") && version)
        snprintf(b->protocol, sizeof b->protocol, "%s", version);
    return write_message(reply);
}

/* A body of server-sent events: each event's data is one JSON-RPC message. cellboxd answers
   with plain JSON, but the transport allows either, and the host asked for both. */
static bool relay_events(bridge *b, json_t *message, answer *a)
{
    char *data = calloc(1, a->body_length + 1);
    size_t data_length = 0;
    bool written = true;
    if (!data) {
        output_error("out of memory reading cellboxd's event stream");
        exit(EXIT_FAILED);
    }
    for (char *line = a->body, *end; written && line && line <= a->body + a->body_length;
         line = end ? end + 1 : NULL) {
        end = strchr(line, '\n');
        size_t length = end ? (size_t)(end - line) : strlen(line);
        if (length && line[length - 1] == '\r')
            length--;
        if (length >= 5 && !strncmp(line, "data:", 5)) {
            size_t skip = length > 5 && line[5] == ' ' ? 6 : 5;
            if (data_length)
                data[data_length++] = '\n';
            memcpy(data + data_length, line + skip, length - skip);
            data_length += length - skip;
        } else if (length == 0 && data_length) { /* a blank line ends an event */
            json_t *reply = json_loadb(data, data_length, 0, NULL);
            if (is_jsonrpc(reply))
                written = relay_reply(b, message, reply);
            else
                output_error("cellboxd sent an event that is not JSON-RPC: %.200s", data);
            json_decref(reply);
            data_length = 0;
        }
    }
    free(data);
    return written;
}

static bool relay_answer(bridge *b, json_t *message, answer *a)
{
    if (a->session[0])
        snprintf(b->session, sizeof b->session, "%s", a->session);
    if (a->status == 202) /* a notification or a response, taken */
        return true;
    if (a->event_stream && a->status < 300)
        return relay_events(b, message, a);
    json_t *reply = json_loadb(a->body, a->body_length, 0, NULL);
    bool written;
    if (is_jsonrpc(reply)) {
        if (a->status == 404 && b->session[0]) {
            output_error("cellboxd ended MCP session %s (restarted, or idle for an hour); the "
                         "host must initialize a new one",
                         b->session);
            b->session[0] = '\0';
        }
        written = relay_reply(b, message, reply);
    } else {
        written = report_refusal(b, message, a, reply);
    }
    json_decref(reply);
    return written;
}

/* Forwards one line from stdin and writes the answer. False when stdout is gone. */
static bool relay_line(bridge *b, char *line, size_t length)
{
    while (length && strchr(" \t\r\n", line[length - 1]))
        line[--length] = '\0';
    if (!length)
        return true;
    json_error_t error;
    json_t *message = json_loadb(line, length, 0, &error);
    if (!message) {
        char why[256];
        snprintf(why, sizeof why,
                 "Parse error: %s (each line of stdin must be one JSON-RPC message)", error.text);
        output_error("%s", why);
        return write_error(NULL, PARSE_ERROR, why);
    }
    answer a;
    CURLcode code = send_request(b, "POST", line, &a);
    bool written = code == CURLE_OK                    ? relay_answer(b, message, &a)
                   : code == CURLE_ABORTED_BY_CALLBACK ? true /* stopping: the host is gone */
                                                       : report_unreachable(b, message, &a, code);
    free(a.body);
    json_decref(message);
    return written;
}

/* DELETE /mcp: the daemon ends the session and deletes its sandbox now, not in an hour. */
static void end_session(bridge *b)
{
    if (!b->session[0])
        return;
    answer a;
    CURLcode code = send_request(b, "DELETE", NULL, &a);
    if (code != CURLE_OK)
        output_error("cannot end MCP session %s at %s: %s; the daemon ends it after an hour "
                     "without requests",
                     b->session, b->endpoint, a.error[0] ? a.error : curl_easy_strerror(code));
    else if (a.status >= 300 && a.status != 404)
        output_error("cellboxd answered HTTP %ld to ending MCP session %s", a.status, b->session);
    free(a.body);
}

int command_mcp(int argc, char **argv)
{
    if (args_wants_help(argc, argv, mcp_usage))
        return EXIT_OK;
    int status = args_positional("mcp", argc, argv, 0, "");
    if (status != EXIT_OK)
        return status;
    bridge b = {.http = curl_easy_init()};
    if (!b.http || asprintf(&b.endpoint, "%s/mcp", client_base_url()) < 0) {
        output_error("out of memory starting the MCP bridge");
        return EXIT_FAILED;
    }
    catch_stop_signals();
    char *line = NULL;
    size_t capacity = 0;
    ssize_t length;
    status = EXIT_OK;
    while (!stopping && (length = getline(&line, &capacity, stdin)) >= 0) {
        if (!relay_line(&b, line, (size_t)length)) {
            output_error("cannot write to stdout (the MCP host went away?): stopping");
            status = EXIT_FAILED;
            break;
        }
    }
    end_session(&b);
    free(line);
    free(b.endpoint);
    curl_easy_cleanup(b.http);
    return status;
}
