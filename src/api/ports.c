#include "api/ports.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "api/errors.h"
#include "common/log.h"
#include "http/proxy.h"
#include "kernel/kernel.h"
#include "model/box.h"
#include "model/pause.h"
#include "model/ttl.h"
#include "sandbox/network_socket.h"

#define MAX_EXCHANGES_PER_SANDBOX 64 /* requests to one sandbox's ports at once */
#define CONNECT_TIMEOUT_MS 10000
#define IDLE_TIMEOUT_S 300           /* an exchange with nothing moving this long is ended */
#define TUNNEL_IDLE_TIMEOUT_S 3600   /* the same for a WebSocket, which may sit silent a while */
#define MAX_QUEUED_BYTES (1 << 20)   /* answer bytes waiting on one client before the inner
                                        server is paused */

/* How many exchanges each sandbox has running, so that one sandbox (or a client hammering its
   ports) cannot take every connection of the daemon. */
typedef struct sandbox_count {
    char id[PORTS_MAX_ID + 1];
    int exchanges;
    struct sandbox_count *next;
} sandbox_count;

static struct {
    char domain[256];
    char token[256];
    sandbox_count *counts;
} ports;

/* Headers that carry cellbox's credentials: a server inside the sandbox runs code the sandbox's
   user wrote, and must not learn the daemon's token. */
static const char *const credential_headers[] = {"X-API-Key", "X-Access-Token",
                                                 "E2B-Traffic-Access-Token", NULL};
static const char *const credential_headers_and_authorization[] = {
    "X-API-Key", "X-Access-Token", "E2B-Traffic-Access-Token", "Authorization", NULL};

void ports_init(const char *domain, int daemon_port, const char *token)
{
    if (domain && *domain)
        snprintf(ports.domain, sizeof ports.domain, "%s", domain);
    else
        snprintf(ports.domain, sizeof ports.domain, "localhost:%d", daemon_port);
    snprintf(ports.token, sizeof ports.token, "%s", token ? token : "");
}

const char *ports_domain(void) { return ports.domain; }

/* The length of `host` without a trailing ":<digits>". */
static size_t name_length(const char *host, size_t length)
{
    size_t i = length;
    while (i > 0 && isdigit((unsigned char)host[i - 1]))
        i--;
    return i > 0 && i < length && host[i - 1] == ':' ? i - 1 : length;
}

/* The rest of the Host after "<port>-<id>." names our domain: the same name, and the same port
   when both say one (a reverse proxy in front may drop or change the port). */
static bool names_our_domain(const char *rest)
{
    size_t rest_length = strlen(rest), domain_length = strlen(ports.domain);
    size_t rest_name = name_length(rest, rest_length);
    size_t domain_name = name_length(ports.domain, domain_length);
    if (rest_name != domain_name || strncasecmp(rest, ports.domain, rest_name) != 0)
        return false;
    bool both_have_ports = rest_name < rest_length && domain_name < domain_length;
    return !both_have_ports || strcmp(rest + rest_name, ports.domain + domain_name) == 0;
}

bool ports_parse_host(const char *host, ports_address *address)
{
    if (!*ports.domain || !host || !isdigit((unsigned char)host[0])) /* before ports_init */
        return false;
    char *end;
    long port = strtol(host, &end, 10);
    if (*end != '-' || port < 1 || port > 65535 || end - host > 5)
        return false;
    const char *id = end + 1;
    size_t id_length = strcspn(id, ".");
    if (id_length == 0 || id_length > PORTS_MAX_ID || id[id_length] != '.' ||
        !names_our_domain(id + id_length + 1))
        return false;
    for (size_t i = 0; i < id_length; i++)
        if (!isalnum((unsigned char)id[i]) && id[i] != '-' && id[i] != '_')
            return false;
    address->port = (int)port;
    memcpy(address->sandbox_id, id, id_length);
    address->sandbox_id[id_length] = '\0';
    return true;
}

bool ports_address_of(const http_request *request, ports_address *address)
{
    return ports_parse_host(http_header(request, "Host"), address);
}

/* ---- exchanges per sandbox ---- */

static sandbox_count *count_of(const char *id, bool create)
{
    for (sandbox_count *c = ports.counts; c; c = c->next)
        if (strcmp(c->id, id) == 0)
            return c;
    if (!create)
        return NULL;
    sandbox_count *c = calloc(1, sizeof *c);
    if (!c)
        die("out of memory");
    snprintf(c->id, sizeof c->id, "%s", id);
    c->next = ports.counts;
    ports.counts = c;
    return c;
}

static void release_count(sandbox_count *count)
{
    if (--count->exchanges > 0)
        return;
    for (sandbox_count **p = &ports.counts; *p; p = &(*p)->next)
        if (*p == count) {
            *p = count->next;
            free(count);
            return;
        }
}

/* ---- forwarding ---- */

/* One request to a sandbox's port, for as long as it runs. */
typedef struct port_exchange {
    ports_address address;
    sandbox_count *count;
} port_exchange;

static void on_exchange_finished(void *arg)
{
    port_exchange *exchange = arg;
    release_count(exchange->count);
    free(exchange);
}

static void on_forward_failed(void *arg, http_request *request, bool refused, const char *why)
{
    const ports_address *address = &((port_exchange *)arg)->address;
    if (refused)
        errors_respond_e2b(request, 502,
                           "The sandbox is running but port %d is not open: nothing listens on "
                           "127.0.0.1:%d in sandbox %s; start a server there that listens on "
                           "0.0.0.0:%d or 127.0.0.1:%d (e.g. python3 -m http.server %d) and retry",
                           address->port, address->port, address->sandbox_id, address->port,
                           address->port, address->port);
    else
        errors_respond_e2b(request, 502, "port %d of sandbox %s gave no answer: %s",
                           address->port, address->sandbox_id, why);
}

/* True (after answering why) when the sandbox's ports cannot be reached now. */
static bool refuse_unreachable(http_request *request, box *b, const ports_address *address)
{
    const char *id = address->sandbox_id;
    char why[256];
    /* traffic resumes a sandbox whose lifecycle says autoResume, as a call into its envd does */
    if (b && box_get_state(b) == BOX_PAUSED && box_resumes_on_call(b) &&
        box_resume(b, why, sizeof why) < 0) {
        errors_respond_e2b(request, 500, "sandbox %s is paused and could not be resumed: %s", id,
                           why);
        return true;
    }
    if (!b || box_get_state(b) == BOX_DEAD) {
        errors_respond_e2b(request, 502,
                           "The sandbox was not found: sandbox %s does not exist (it was killed, "
                           "or timed out)", id);
    } else if (box_get_state(b) == BOX_PAUSED) {
        errors_respond_e2b(request, 502,
                           "sandbox %s is paused: resume it (Sandbox.connect, or POST "
                           "/sandboxes/%s/connect) and retry, or create it with lifecycle "
                           "{onTimeout: 'pause', autoResume: true} so that traffic resumes it",
                           id, id);
    } else {
        sandbox_count *count = count_of(id, false);
        if (!count || count->exchanges < MAX_EXCHANGES_PER_SANDBOX)
            return false;
        http_add_response_header(request, "Retry-After", "1");
        errors_respond_e2b(request, 429,
                           "sandbox %s has %d requests to its ports open, the most at once: let "
                           "some finish (or close idle ones) and retry", id,
                           MAX_EXCHANGES_PER_SANDBOX);
    }
    return true;
}

/* Authorization goes on unless it is cellbox's token (the inner server may use its own). */
static const char *const *withheld_headers(const http_request *request)
{
    const char *auth = http_header(request, "Authorization");
    if (!auth || !*ports.token)
        return credential_headers;
    const char *given = strncasecmp(auth, "token ", 6) == 0    ? auth + 6
                        : strncasecmp(auth, "bearer ", 7) == 0 ? auth + 7
                                                               : NULL;
    return given && strcmp(given, ports.token) == 0 ? credential_headers_and_authorization
                                                    : credential_headers;
}

void ports_forward(http_request *request, const ports_address *address)
{
    box *b = box_find(address->sandbox_id);
    if (refuse_unreachable(request, b, address))
        return;
    char why[256];
    int pidfd = kernel_pidfd(box_default_kernel(b));
    int socket = pidfd >= 0 ? network_socket_open(pidfd, why, sizeof why) : -1;
    if (pidfd < 0)
        snprintf(why, sizeof why, "sandbox %s is still starting; retry in a moment", box_id(b));
    if (socket < 0) {
        errors_respond_e2b(request, 502, "cannot reach port %d of sandbox %s: %s", address->port,
                           address->sandbox_id, why);
        return;
    }
    port_exchange *exchange = malloc(sizeof *exchange);
    if (!exchange)
        die("out of memory");
    exchange->address = *address;
    exchange->count = count_of(address->sandbox_id, true);
    exchange->count->exchanges++;
    http_proxy_target target = {
        .socket = socket,
        .port = address->port,
        .withheld_headers = withheld_headers(request),
        .withheld_query = "token",
        .connect_timeout_ms = CONNECT_TIMEOUT_MS,
        .idle_timeout_s = IDLE_TIMEOUT_S,
        .max_queued = MAX_QUEUED_BYTES,
        .tunnel_idle_timeout_s = TUNNEL_IDLE_TIMEOUT_S,
    };
    http_proxy_forward(request, &target, on_forward_failed, on_exchange_finished, exchange);
}

void ports_stop(void) { http_proxy_stop(); }
