#include "http/proxy.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/buffer.h"
#include "common/log.h"
#include "common/loop.h"
#include "http/tunnel.h"

/* One request on its way in and its answer on its way out. It ends when libcurl is done with
   the inner server and, once an answer was started, the client's response is closed too. */
typedef struct exchange {
    CURL *easy;                   /* NULL once libcurl is done */
    http_request *request;        /* NULL once answered by on_failed or closed */
    http_stream *stream;          /* the streamed answer, once the inner server's head is in */
    struct curl_slist *headers;   /* the request headers passed on */
    char *target;                 /* URL of the inner server's resource */
    int socket;                   /* until libcurl asks for it */
    int given_socket;             /* then libcurl's (it closes it), for an Upgrade to keep */
    int port;
    size_t max_queued;
    bool paused;                  /* the inner server waits for the client to read */
    bool upgrade_asked;           /* the client asked for an Upgrade (a WebSocket) */
    bool upgrading;               /* the inner server switched: until the tunnel closes */
    int inner_socket;             /* after the switch, until the tunnel takes it */
    buffer early;                 /* bytes the inner server sent right after its 101 */
    long tunnel_idle_timeout_s;
    /* the client's body, passed on as it comes */
    buffer upload;                /* received, not yet taken by libcurl */
    bool body_done;               /* the client's body is all in */
    bool upload_waits;            /* libcurl's read is paused until more comes */
    bool body_paused;             /* the client's body is stopped: `upload` is full */
    /* the inner server's answer, held until the client's body is in (libmicrohttpd takes an
       answer before a body or after it, not in between) */
    bool head_waits;              /* its head is in; its body waits (libcurl paused) */
    bool done_early;              /* the transfer ended meanwhile: the handle is kept for its head */
    bool failure_waits;           /* it failed meanwhile: answered at the body's end */
    bool failure_refused;
    bool finished;                /* on_finished ran; freed after the loop's batch */
    http_proxy_failed on_failed;
    void (*on_finished)(void *arg);
    void *arg;
    char error[CURL_ERROR_SIZE];
    struct exchange *prev, *next; /* every exchange running, for http_proxy_stop */
} exchange;

/* A socket libcurl asked the loop to watch. */
typedef struct curl_watch {
    loop_watch watch;
    curl_socket_t socket;
    bool removed; /* an event collected before the removal is ignored */
} curl_watch;

static struct {
    CURLM *multi;
    loop_timer_id timer;
    exchange *running;
} proxy;

static const char *const hop_by_hop_headers[] = {
    "Host", "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "TE",
    "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Expect", NULL};

static bool listed(const char *const *names, const char *name)
{
    for (size_t i = 0; names && names[i]; i++)
        if (strcasecmp(names[i], name) == 0)
            return true;
    return false;
}

/* ---- ending an exchange ---- */

static void release_easy(exchange *x)
{
    if (!x->easy)
        return;
    curl_multi_remove_handle(proxy.multi, x->easy);
    curl_easy_cleanup(x->easy);
    x->easy = NULL;
}

static void free_exchange(void *arg)
{
    exchange *x = arg;
    curl_slist_free_all(x->headers);
    buffer_free(&x->early);
    buffer_free(&x->upload);
    free(x->target);
    free(x);
}

/* Over when libcurl is done and no answer is still being sent, nor a tunnel open. */
static void finish_if_over(exchange *x)
{
    if (x->finished || x->easy || x->stream || x->upgrading || x->failure_waits)
        return;
    x->finished = true;
    if (x->prev)
        x->prev->next = x->next;
    else
        proxy.running = x->next;
    if (x->next)
        x->next->prev = x->prev;
    if (x->socket >= 0)
        close(x->socket);
    x->on_finished(x->arg);
    loop_defer(free_exchange, x); /* a libcurl callback may still be on the stack */
}

/* The client's response is closed: sent whole, or the client went away (then the inner
   server's transfer is cut). */
static void on_stream_closed(void *arg, bool completed)
{
    exchange *x = arg;
    x->stream = NULL;
    x->request = NULL;
    release_easy(x);
    finish_if_over(x);
}

static void on_transfer_done(exchange *x, CURLcode result)
{
    if (x->head_waits && !x->body_done) { /* answered before the client's body ended */
        curl_multi_remove_handle(proxy.multi, x->easy);
        x->done_early = true;
        return;
    }
    release_easy(x);
    if (x->stream) {
        if (result != CURLE_OK)
            log_info("proxy: the answer from port %d was cut short: %s", x->port,
                     *x->error ? x->error : curl_easy_strerror(result));
        http_stream_end(x->stream);
    } else if (x->request && !x->upgrading && !x->body_done) {
        if (!*x->error) /* kept for the answer at the body's end */
            snprintf(x->error, sizeof x->error, "%s", curl_easy_strerror(result));
        x->failure_waits = true;
        x->failure_refused = result == CURLE_COULDNT_CONNECT;
        http_resume_body(x->request); /* the rest is read and dropped */
    } else if (x->request && !x->upgrading) {
        const char *why = *x->error ? x->error : curl_easy_strerror(result);
        http_request *request = x->request;
        x->request = NULL;
        x->on_failed(x->arg, request, result == CURLE_COULDNT_CONNECT, why);
    }
    finish_if_over(x);
}

/* ---- libcurl on the loop ---- */

/* An exchange whose inner server switched protocols leaves libcurl: the tunnel reads its socket
   (a duplicate) from now on. libcurl has handed every byte it read past the 101 to on_body. */
static void detach_upgraded_transfers(void)
{
    for (exchange *x = proxy.running; x; x = x->next)
        if (x->upgrading && x->easy)
            release_easy(x);
}

static void collect_finished_transfers(void)
{
    CURLMsg *message;
    int left;
    while ((message = curl_multi_info_read(proxy.multi, &left))) {
        if (message->msg != CURLMSG_DONE)
            continue;
        exchange *x = NULL;
        curl_easy_getinfo(message->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        if (x)
            on_transfer_done(x, message->data.result);
    }
    detach_upgraded_transfers();
}

static void on_curl_socket(void *owner, uint32_t events)
{
    curl_watch *w = owner;
    if (w->removed)
        return;
    int mask = (events & EPOLLIN ? CURL_CSELECT_IN : 0) | (events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
               (events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
    int running;
    curl_multi_socket_action(proxy.multi, w->socket, mask, &running);
    collect_finished_transfers();
}

static int watch_curl_socket(CURL *easy, curl_socket_t socket, int what, void *userp, void *socketp)
{
    curl_watch *w = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (w) {
            loop_watch_remove(&w->watch);
            w->removed = true;
            curl_multi_assign(proxy.multi, socket, NULL);
            loop_defer(free, w);
        }
        return 0;
    }
    uint32_t events = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
    if (!w) {
        w = calloc(1, sizeof *w);
        if (!w)
            die("out of memory");
        w->socket = socket;
        loop_watch_add(&w->watch, socket, events, on_curl_socket, w);
        curl_multi_assign(proxy.multi, socket, w);
    } else {
        loop_watch_modify(&w->watch, events);
    }
    return 0;
}

static void on_curl_timeout(void *arg)
{
    proxy.timer = 0;
    int running;
    curl_multi_socket_action(proxy.multi, CURL_SOCKET_TIMEOUT, 0, &running);
    collect_finished_transfers();
}

static int set_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    loop_timer_cancel(proxy.timer);
    proxy.timer = timeout_ms >= 0 ? loop_timer_add(timeout_ms, on_curl_timeout, NULL) : 0;
    return 0;
}

static void start_multi(void)
{
    if (proxy.multi)
        return;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || !(proxy.multi = curl_multi_init()))
        die("cannot start libcurl for the port proxy");
    curl_multi_setopt(proxy.multi, CURLMOPT_SOCKETFUNCTION, watch_curl_socket);
    curl_multi_setopt(proxy.multi, CURLMOPT_TIMERFUNCTION, set_curl_timer);
}

/* ---- libcurl's callbacks for one exchange ---- */

/* The socket the caller opened (in the sandbox's network namespace) is the only one libcurl
   gets: it cannot open one of its own in the daemon's namespace. */
static curl_socket_t hand_over_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *address)
{
    exchange *x = clientp;
    if (purpose != CURLSOCKTYPE_IPCXN || x->socket < 0)
        return CURL_SOCKET_BAD;
    int socket = x->socket;
    x->socket = -1;
    x->given_socket = socket;
    return socket;
}

static void on_drained(void *arg)
{
    exchange *x = arg;
    if (x->paused && x->easy) {
        x->paused = false;
        curl_easy_pause(x->easy, CURLPAUSE_CONT);
    }
}

/* The inner server's head is in: the client's answer starts with its status and headers. */
static void start_answer(exchange *x)
{
    long status = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    struct curl_header *header = NULL;
    while ((header = curl_easy_nextheader(x->easy, CURLH_HEADER, -1, header)))
        if (!listed(hop_by_hop_headers, header->name))
            http_add_response_header(x->request, header->name, header->value);
    x->stream = http_respond_stream(x->request, (int)status, NULL, on_stream_closed, x);
    http_stream_on_drained(x->stream, on_drained);
}

static void on_tunnel_closed(void *arg)
{
    exchange *x = arg;
    x->upgrading = false;
    finish_if_over(x);
}

/* The client's socket, once it has its 101 too: the tunnel joins it to the inner server's. */
static void on_client_upgraded(void *arg, int socket, const char *extra, size_t extra_size,
                               void *handle)
{
    exchange *x = arg;
    x->request = NULL;
    if (socket < 0) { /* the client went away before the switch */
        close(x->inner_socket);
        x->inner_socket = -1;
        on_tunnel_closed(x);
        return;
    }
    http_tunnel_ends ends = {
        .client = socket,
        .close_client = http_upgraded_close,
        .client_handle = handle,
        .inner = x->inner_socket,
        .to_inner = extra,
        .to_inner_length = extra_size,
        .to_client = buffer_head(&x->early),
        .to_client_length = buffer_size(&x->early),
        .idle_timeout_s = x->tunnel_idle_timeout_s,
    };
    x->inner_socket = -1;
    http_tunnel_start(&ends, on_tunnel_closed, x);
    buffer_free(&x->early);
}

/* The inner server answered an Upgrade with 101: the client gets the same answer, then both
   sockets are joined. The socket is duplicated because libcurl closes its own when the transfer
   is removed (detach_upgraded_transfers). */
static void start_upgrade(exchange *x)
{
    x->inner_socket = fcntl(x->given_socket, F_DUPFD_CLOEXEC, 3);
    if (x->inner_socket < 0) {
        snprintf(x->error, sizeof x->error, "the inner server's socket could not be kept");
        return; /* the transfer ends with no answer sent: on_failed answers */
    }
    struct curl_header *header = NULL; /* libcurl files a 101's headers as those of a 1xx */
    while ((header = curl_easy_nextheader(x->easy, CURLH_1XX, -1, header)))
        if (strcasecmp(header->name, "Upgrade") == 0 || !listed(hop_by_hop_headers, header->name))
            http_add_response_header(x->request, header->name, header->value);
    x->upgrading = true;
    http_upgrade_raw(x->request, on_client_upgraded, x);
}

static size_t on_header_line(char *line, size_t size, size_t count, void *arg)
{
    exchange *x = arg;
    size_t n = size * count;
    bool head_ends = n <= 2 && (n == 0 || line[0] == '\r' || line[0] == '\n');
    long status = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    if (head_ends && status == 101 && x->upgrade_asked && !x->upgrading && x->request) {
        if (x->body_done) /* an Upgrade has no body: it is in as soon as the head is */
            start_upgrade(x);
        return x->upgrading ? n : 0; /* 0 ends the transfer */
    }
    /* an interim answer (100 Continue) is followed by the real one */
    if (head_ends && status >= 200 && !x->stream && x->request) {
        if (x->body_done)
            start_answer(x);
        else
            x->head_waits = true;
    }
    return n;
}

static size_t on_body(char *data, size_t size, size_t count, void *arg)
{
    exchange *x = arg;
    size_t n = size * count;
    if (x->upgrading) {
        buffer_append(&x->early, data, n);
        return n;
    }
    if (!x->stream)
        return x->head_waits ? CURL_WRITEFUNC_PAUSE : n;
    if (http_stream_queued(x->stream) >= x->max_queued) {
        x->paused = true; /* libcurl keeps these bytes and hands them again on resume */
        return CURL_WRITEFUNC_PAUSE;
    }
    http_stream_write(x->stream, data, n);
    return n;
}

/* ---- the request passed on ---- */

static void append_escaped(buffer *out, CURL *easy, const char *text)
{
    char *escaped = curl_easy_escape(easy, text, 0);
    if (!escaped)
        die("out of memory");
    buffer_append(out, escaped, strlen(escaped));
    curl_free(escaped);
}

typedef struct query_builder {
    buffer *out;
    CURL *easy;
    const char *withheld;
    bool first;
} query_builder;

static void append_query_argument(void *arg, const char *name, const char *value)
{
    query_builder *builder = arg;
    if (builder->withheld && strcmp(name, builder->withheld) == 0)
        return;
    buffer_append(builder->out, builder->first ? "?" : "&", 1);
    builder->first = false;
    append_escaped(builder->out, builder->easy, name);
    if (value) {
        buffer_append(builder->out, "=", 1);
        append_escaped(builder->out, builder->easy, value);
    }
}

/* libmicrohttpd decoded the path and query; each segment and argument is encoded again. */
static char *target_url(exchange *x, const char *withheld_query)
{
    buffer url = {0};
    char origin[64];
    int n = snprintf(origin, sizeof origin, "http://127.0.0.1:%d", x->port);
    buffer_append(&url, origin, (size_t)n);
    const char *path = http_path(x->request);
    while (*path == '/') {
        path++;
        size_t length = strcspn(path, "/");
        char *segment = strndup(path, length);
        if (!segment)
            die("out of memory");
        buffer_append(&url, "/", 1);
        append_escaped(&url, x->easy, segment);
        free(segment);
        path += length;
    }
    query_builder builder = {&url, x->easy, withheld_query, true};
    http_each_query_argument(x->request, append_query_argument, &builder);
    buffer_append(&url, "", 1);
    char *text = strdup(buffer_head(&url));
    buffer_free(&url);
    if (!text)
        die("out of memory");
    return text;
}

typedef struct header_builder {
    exchange *x;
    const char *const *withheld;
    bool has_accept, has_content_type;
} header_builder;

static void add_header(exchange *x, const char *name, const char *value)
{
    size_t n = strlen(name) + strlen(value) + 3;
    char *line = malloc(n);
    if (!line)
        die("out of memory");
    snprintf(line, n, "%s:%s%s", name, *value ? " " : "", value);
    struct curl_slist *list = curl_slist_append(x->headers, line);
    free(line);
    if (!list)
        die("out of memory");
    x->headers = list;
}

static void pass_on_header(void *arg, const char *name, const char *value)
{
    header_builder *builder = arg;
    bool upgrade = builder->x->upgrade_asked && strcasecmp(name, "Upgrade") == 0;
    if ((listed(hop_by_hop_headers, name) && !upgrade) || listed(builder->withheld, name))
        return;
    builder->has_accept |= strcasecmp(name, "Accept") == 0;
    builder->has_content_type |= strcasecmp(name, "Content-Type") == 0;
    add_header(builder->x, name, value ? value : "");
}

/* The client's headers, then what libcurl would otherwise add of its own (an empty value
   removes one of libcurl's: its Accept, a form Content-Type, Expect: 100-continue). */
static void build_headers(exchange *x, const char *const *withheld)
{
    header_builder builder = {x, withheld, false, false};
    http_each_header(x->request, pass_on_header, &builder);
    char host[64];
    snprintf(host, sizeof host, "localhost:%d", x->port);
    add_header(x, "Host", host);
    const char *client_host = http_header(x->request, "Host");
    if (client_host)
        add_header(x, "X-Forwarded-Host", client_host);
    add_header(x, "X-Forwarded-Proto", "http");
    add_header(x, "Expect", "");
    if (x->upgrade_asked)
        add_header(x, "Connection", "Upgrade");
    if (!builder.has_accept)
        add_header(x, "Accept", "");
    if (!builder.has_content_type)
        add_header(x, "Content-Type", "");
}

/* ---- the client's body, as it comes ---- */

/* libcurl asks for the next piece of the body: what came, the end, or a pause until more. */
static size_t read_upload(char *out, size_t size, size_t count, void *arg)
{
    exchange *x = arg;
    size_t n = buffer_size(&x->upload) < size * count ? buffer_size(&x->upload) : size * count;
    if (n > 0) {
        memcpy(out, buffer_head(&x->upload), n);
        buffer_consume(&x->upload, n);
        if (x->body_paused && x->request && buffer_size(&x->upload) < x->max_queued / 2) {
            x->body_paused = false;
            http_resume_body(x->request);
        }
        return n;
    }
    if (x->body_done)
        return 0;
    x->upload_waits = true;
    return CURL_READFUNC_PAUSE;
}

static void wake_upload(exchange *x)
{
    if (x->upload_waits && x->easy && !x->done_early) {
        x->upload_waits = false;
        curl_easy_pause(x->easy, CURLPAUSE_CONT);
    }
}

static int on_client_data(void *arg, const char *data, size_t length)
{
    exchange *x = arg;
    if (x->failure_waits)
        return 0; /* dropped: the answer is the failure */
    buffer_append(&x->upload, data, length);
    wake_upload(x);
    if (buffer_size(&x->upload) > x->max_queued && !x->body_paused) {
        x->body_paused = true;
        http_pause_body(x->request);
    }
    return 0;
}

/* The client's body is in: the answer can start (now, or when the inner server's head is in). */
static void on_client_body_end(http_request *request, void *arg)
{
    exchange *x = arg;
    x->body_done = true;
    if (x->failure_waits) {
        x->failure_waits = false;
        x->request = NULL;
        x->on_failed(x->arg, request, x->failure_refused, x->error);
        finish_if_over(x);
        return;
    }
    if (x->head_waits) {
        x->head_waits = false;
        start_answer(x);
        if (x->done_early) { /* its whole answer is in the head */
            curl_easy_cleanup(x->easy);
            x->easy = NULL;
            http_stream_end(x->stream);
        } else {
            curl_easy_pause(x->easy, CURLPAUSE_CONT);
        }
        return;
    }
    wake_upload(x);
    http_respond_later(request);
}

/* The client went away before its body ended. */
static void on_client_abort(void *arg)
{
    exchange *x = arg;
    x->request = NULL;
    x->failure_waits = false;
    if (x->easy)
        curl_multi_remove_handle(proxy.multi, x->easy); /* done_early's handle is out already */
    if (x->easy)
        curl_easy_cleanup(x->easy);
    x->easy = NULL;
    finish_if_over(x);
}

static const http_body_receiver client_body = {on_client_data, on_client_body_end, on_client_abort};

/* A body is passed on as it comes: with its length when the client gave one, else chunked. */
static void set_method_and_body(exchange *x)
{
    const char *method = http_method(x->request);
    const char *length = http_header(x->request, "Content-Length");
    bool has_body = (length && strcmp(length, "0") != 0) ||
                    http_header(x->request, "Transfer-Encoding");
    if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(x->easy, CURLOPT_NOBODY, 1L);
        return;
    }
    if (has_body) {
        curl_easy_setopt(x->easy, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(x->easy, CURLOPT_READFUNCTION, read_upload);
        curl_easy_setopt(x->easy, CURLOPT_READDATA, x);
        curl_easy_setopt(x->easy, CURLOPT_INFILESIZE_LARGE,
                         length ? (curl_off_t)strtoull(length, NULL, 10) : (curl_off_t)-1);
    } else if (strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
               strcmp(method, "PATCH") == 0) {
        curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
        curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, "");
    }
    if (strcmp(method, "GET") != 0 || has_body)
        curl_easy_setopt(x->easy, CURLOPT_CUSTOMREQUEST, method);
}

static void configure_transfer(exchange *x, const http_proxy_target *target)
{
    CURL *easy = x->easy;
    curl_easy_setopt(easy, CURLOPT_URL, x->target);
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(easy, CURLOPT_PROXY, "");          /* never the daemon's http_proxy */
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_FRESH_CONNECT, 1L);  /* see proxy.h: no connection reuse */
    curl_easy_setopt(easy, CURLOPT_FORBID_REUSE, 1L);
    curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(easy, CURLOPT_HTTP_CONTENT_DECODING, 0L); /* gzip passes through as is */
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, hand_over_socket);
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, x);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, target->connect_timeout_ms);
    curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, target->idle_timeout_s);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header_line);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, x->error);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, x);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, x->headers);
    set_method_and_body(x);
}

void http_proxy_forward(http_request *request, const http_proxy_target *target,
                        http_proxy_failed on_failed, void (*on_finished)(void *arg), void *arg)
{
    start_multi();
    exchange *x = calloc(1, sizeof *x);
    if (!x || !(x->easy = curl_easy_init()))
        die("out of memory");
    x->request = request;
    x->socket = target->socket;
    x->port = target->port;
    x->max_queued = target->max_queued;
    x->inner_socket = -1;
    x->tunnel_idle_timeout_s = target->tunnel_idle_timeout_s;
    x->upgrade_asked = http_header(request, "Upgrade") != NULL;
    x->on_failed = on_failed;
    x->on_finished = on_finished;
    x->arg = arg;
    x->next = proxy.running;
    if (proxy.running)
        proxy.running->prev = x;
    proxy.running = x;
    x->target = target_url(x, target->withheld_query);
    build_headers(x, target->withheld_headers);
    configure_transfer(x, target);
    http_receive_body(request, &client_body, x);
    if (curl_multi_add_handle(proxy.multi, x->easy) != CURLM_OK)
        on_transfer_done(x, CURLE_FAILED_INIT);
}

void http_proxy_stop(void)
{
    http_tunnel_close_all();
    exchange *next;
    for (exchange *x = proxy.running; x; x = next) {
        next = x->next; /* x may be over (and unlinked) once its transfer ends */
        snprintf(x->error, sizeof x->error, "the server is shutting down");
        on_transfer_done(x, CURLE_ABORTED_BY_CALLBACK);
    }
}
