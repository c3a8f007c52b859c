/* Connect client streaming (api/connect.c) over the real HTTP server: a test-only method,
   test.Collect/Sum, adds up the "n" of each request message and answers {"sum"}. Its envelopes
   arrive in chunks cut anywhere (one envelope split across two chunks), and the method sees each
   message once, in order; a message it refuses, a body cut inside an envelope, and a client that
   hangs up mid-body each end the call, and `close` is called exactly once every time. The client
   is a child process on a loopback socket; every loop is bounded by a guard timer. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/connect.h"
#include "check.h"
#include "common/loop.h"

#define GUARD_MS 10000

/* ---- the test method ---- */

typedef struct sum_call {
    long long sum;
    int messages;
} sum_call;

static int opened, closed, ended;

static void *sum_open(void *context, connect_error *error)
{
    opened++;
    return calloc(1, sizeof(sum_call));
}

static bool sum_message(void *call, json_t *message, connect_error *error)
{
    sum_call *sum = call;
    json_int_t n = json_integer_value(json_object_get(message, "n"));
    if (n < 0) {
        connect_fail(error, "invalid_argument", "'n' must not be negative");
        return false;
    }
    sum->sum += n;
    sum->messages++;
    return true;
}

static json_t *sum_end(void *call, connect_error *error)
{
    sum_call *sum = call;
    ended++;
    return json_pack("{s:I, s:i}", "sum", (json_int_t)sum->sum, "messages", sum->messages);
}

static void sum_close(void *call)
{
    closed++;
    free(call);
}

static const connect_client_streaming sum_method = {sum_open, sum_message, sum_end, sum_close};
static const connect_method collect_methods[] = {
    {.name = "Sum", .client_streaming = &sum_method},
    {.name = NULL},
};
static const connect_service collect_service = {"test.Collect", collect_methods};
static const connect_service *const services[] = {&collect_service, NULL};

static bool streams_body(const http_request *request)
{
    return connect_streams_body(services, http_method(request), http_path(request));
}

static void dispatch(http_request *request)
{
    connect_serve(request, services, "test.Collect", "Sum", NULL);
}

/* ---- the client: a child writing the body in chunks, then reading the answer ---- */

static void write_all(int fd, const void *data, size_t length)
{
    const char *at = data;
    while (length > 0) {
        ssize_t n = write(fd, at, length);
        if (n <= 0)
            _exit(3);
        at += n;
        length -= (size_t)n;
    }
}

static size_t envelope(char *out, const char *json)
{
    uint32_t length = (uint32_t)strlen(json);
    out[0] = 0;
    uint32_t big = htonl(length);
    memcpy(out + 1, &big, 4);
    memcpy(out + 5, json, length);
    return 5 + length;
}

/* Sends `body` as chunks cut at each offset in `cuts` (ascending, ended by 0); with
   `hang_up`, closes after the last cut instead of ending the body. The answer goes to out_fd. */
static void client(int port, int out_fd, const char *body, size_t length, const size_t *cuts,
                   bool hang_up)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&address, sizeof address) < 0)
        _exit(2);
    const char head[] = "POST /test.Collect/Sum HTTP/1.1\r\nHost: test\r\n"
                        "Content-Type: application/connect+json\r\n"
                        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    write_all(s, head, sizeof head - 1);
    size_t from = 0;
    for (int i = 0;; i++) {
        size_t to = cuts[i] ? cuts[i] : length;
        char size[32];
        snprintf(size, sizeof size, "%zx\r\n", to - from);
        write_all(s, size, strlen(size));
        write_all(s, body + from, to - from);
        write_all(s, "\r\n", 2);
        usleep(20000); /* each chunk its own read on the server */
        from = to;
        if (!cuts[i] || (hang_up && !cuts[i + 1]))
            break;
    }
    if (hang_up)
        _exit(0);
    write_all(s, "0\r\n\r\n", 5);
    char answer[4096];
    ssize_t n;
    while ((n = read(s, answer, sizeof answer)) > 0)
        write_all(out_fd, answer, (size_t)n);
    _exit(0);
}

/* ---- the server side: the loop runs until the client is done and the call closed ---- */

typedef struct exchange {
    loop_watch watch;
    char answer[8192];
    size_t length;
    bool client_done;
} exchange;

static bool guard_fired;

static void on_guard(void *arg)
{
    guard_fired = true;
    loop_stop();
}

static void on_answer(void *owner, uint32_t events)
{
    exchange *x = owner;
    ssize_t n = read(x->watch.fd, x->answer + x->length, sizeof x->answer - 1 - x->length);
    if (n > 0) {
        x->length += (size_t)n;
        return;
    }
    x->client_done = true;
    loop_watch_remove(&x->watch);
}

static void check_done(void *arg)
{
    exchange *x = arg;
    if (x->client_done && closed == opened && opened > 0)
        loop_stop();
    else
        loop_timer_add(10, check_done, x);
}

/* One call: the answer's body (after the head) in x->answer. */
static void exchange_with(int port, exchange *x, const char *body, size_t length,
                          const size_t *cuts, bool hang_up)
{
    memset(x, 0, sizeof *x);
    opened = closed = ended = 0;
    int pipe_fds[2];
    if (pipe(pipe_fds) < 0)
        abort();
    pid_t child = fork();
    if (child == 0) {
        close(pipe_fds[0]);
        client(port, pipe_fds[1], body, length, cuts, hang_up);
    }
    close(pipe_fds[1]);
    loop_watch_add(&x->watch, pipe_fds[0], EPOLLIN, on_answer, x);
    guard_fired = false;
    loop_timer_id guard = loop_timer_add(GUARD_MS, on_guard, NULL);
    loop_timer_add(10, check_done, x);
    loop_run();
    loop_timer_cancel(guard);
    CHECK(!guard_fired);
    loop_watch_remove(&x->watch);
    close(pipe_fds[0]);
    waitpid(child, NULL, 0);
    x->answer[x->length] = '\0';
}

/* The envelopes of the answer's body: their JSON texts, the last one's flag in *last_flags. */
static int answer_envelopes(const exchange *x, char texts[][512], int max, int *last_flags)
{
    const char *body = strstr(x->answer, "\r\n\r\n");
    if (!body || !strstr(x->answer, " 200 ") || !strstr(x->answer, "application/connect+json"))
        return -1;
    body += 4;
    size_t left = x->length - (size_t)(body - x->answer);
    int count = 0;
    while (left >= 5 && count < max) {
        uint32_t big;
        memcpy(&big, body + 1, 4);
        size_t length = ntohl(big);
        if (length > left - 5 || length >= 512)
            return -1;
        memcpy(texts[count], body + 5, length);
        texts[count][length] = '\0';
        *last_flags = (unsigned char)body[0];
        count++;
        body += 5 + length;
        left -= 5 + length;
    }
    return left == 0 ? count : -1;
}

/* ---- tests ---- */

static int port;

/* What one streaming call answered: its envelopes' JSON texts, how many (-1 when the answer is
   not a well-formed streaming answer) and the last envelope's flags. */
typedef struct streamed_answer {
    char texts[4][512];
    int count;
    int last_flags;
} streamed_answer;

/* Sends `body` as one call, cut into writes at `cuts`, and reads its answer's envelopes. */
static void call_and_read_envelopes(const char *body, size_t length, const size_t *cuts,
                                    streamed_answer *answer)
{
    exchange x;
    exchange_with(port, &x, body, length, cuts, false);
    answer->last_flags = -1;
    answer->count = answer_envelopes(&x, answer->texts, 4, &answer->last_flags);
}

static void test_messages_split_across_chunks_arrive_whole_and_in_order(void)
{
    char body[256];
    size_t length = envelope(body, "{\"n\":1}");
    length += envelope(body + length, "{\"n\":2}");
    length += envelope(body + length, "{\"n\":39}");
    size_t cuts[] = {3, 14, 20, 0}; /* inside the first header, the second envelope, ... */
    streamed_answer answer;
    call_and_read_envelopes(body, length, cuts, &answer);
    CHECK(answer.count == 2);
    if (answer.count == 2) {
        CHECK_STR(answer.texts[0], "{\"sum\":42,\"messages\":3}");
        CHECK_STR(answer.texts[1], "{}");
        CHECK(answer.last_flags == 0x02);
    }
    CHECK(opened == 1 && ended == 1 && closed == 1);
}

static void test_a_refused_message_ends_the_call_with_its_error(void)
{
    char body[256];
    size_t length = envelope(body, "{\"n\":1}");
    length += envelope(body + length, "{\"n\":-1}");
    length += envelope(body + length, "{\"n\":5}");
    size_t cuts[] = {12, 0};
    streamed_answer answer;
    call_and_read_envelopes(body, length, cuts, &answer);
    CHECK(answer.count == 1);
    if (answer.count == 1) {
        CHECK(strstr(answer.texts[0], "\"code\":\"invalid_argument\"") != NULL);
        CHECK(answer.last_flags == 0x02);
    }
    CHECK(opened == 1 && ended == 0 && closed == 1);
}

static void test_a_body_cut_inside_an_envelope_is_invalid(void)
{
    char body[256];
    size_t length = envelope(body, "{\"n\":1}");
    length += envelope(body + length, "{\"n\":2}") - 3;
    size_t cuts[] = {0};
    streamed_answer answer;
    call_and_read_envelopes(body, length, cuts, &answer);
    CHECK(answer.count == 1);
    if (answer.count == 1)
        CHECK(strstr(answer.texts[0], "ended inside an envelope") != NULL);
    CHECK(opened == 1 && ended == 0 && closed == 1);
}

static void test_a_client_that_hangs_up_mid_body_closes_the_call(void)
{
    char body[256];
    size_t length = envelope(body, "{\"n\":1}");
    length += envelope(body + length, "{\"n\":2}");
    size_t cuts[] = {9, 0};
    exchange x;
    exchange_with(port, &x, body, length, cuts, true);
    CHECK(x.length == 0);
    CHECK(opened == 1 && ended == 0 && closed == 1);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    loop_init();
    port = http_server_start(&(http_server_options){.ip = "127.0.0.1",
                                                    .port = 0,
                                                    .base_url = "/",
                                                    .token = "",
                                                    .max_body_size = 1 << 20,
                                                    .streams_body = streams_body},
                             dispatch);
    RUN(test_messages_split_across_chunks_arrive_whole_and_in_order);
    RUN(test_a_refused_message_ends_the_call_with_its_error);
    RUN(test_a_body_cut_inside_an_envelope_is_invalid);
    RUN(test_a_client_that_hangs_up_mid_body_closes_the_call);
    http_server_stop();
    return check_summary("connect_stream");
}
