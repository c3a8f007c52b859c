/* language_host — cellbox-kernel for the languages that are not Python (docs/languages.md).
 *
 *   cellbox-kernel --channel-fd=N --language=bash
 *   cellbox-kernel --channel-fd=N --language=javascript|typescript --share-dir=DIR
 *
 * Bash is a kernel written in C here (kernel_bash.c). JavaScript and TypeScript run in Node
 * (DIR/node/kernel.js), which speaks the daemon's own frames (docs/kernel-protocol.md): this file
 * relays them both ways unchanged, the daemon's to Node's fd 3 and Node's, from its fd 4, to the
 * daemon. It stays in the middle, rather than handing Node the daemon's channel, for the two
 * things Node cannot do in a single-threaded event loop at the right moment: draining fd 1 and 2
 * before each frame, and taking a new channel when a restarted daemon adopts the kernel (the
 * switch happens here; Node never sees it). The drain is exact because Node waits after each
 * frame until this process acknowledges it (one byte back on fd 4, sent once the frame is
 * written to the daemon): nothing Node prints after a frame can be drained before it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/jupyter_message.h"
#include "runtime/kernel_bash.h"
#include "runtime/kernel_channel.h"
#include "runtime/kernel_child.h"
#include "runtime/kernel_runtime.h"

#define NODE_PATH "/usr/bin/node"

enum {
    MAX_FRAME = 64 << 20,          /* the contract's limit, for Node's frames as for ours */
    CHILD_READ_CHUNK = 256 << 10,  /* one read of Node's socket */
    CHILD_EXIT_WAIT_MS = 10 * 1000 /* Node closed its socket: how long it may take to exit */
};

struct language_options {
    int channel_fd;        /* the daemon's channel */
    const char *language;  /* bash, javascript or typescript */
    const char *share_dir; /* holds node/kernel.js */
};

/* A growing byte buffer: Node's frames not yet whole, or the daemon's not yet written to Node. */
struct bytes {
    char *data;
    size_t used;
    size_t size;
};

struct node_relay {
    kernel_channel *channel; /* the daemon's */
    kernel_child node;       /* the Node process */
    int node_requests;       /* our end of Node's fd 3, the daemon's frames, non-blocking */
    int node_frames;         /* our end of Node's fd 4, its frames and our acks, non-blocking */
    struct bytes from_node;  /* Node's bytes, split into frames as they complete */
    struct bytes to_node;    /* the daemon's frames Node has not taken yet */
    jupyter_session session; /* for the status this process sends after a switch */
    json_t *last_parent;     /* parent_header of Node's last status (NULL: none yet) */
    bool last_busy;          /* Node's last status was busy */
    bool broken;             /* Node sent something that is not a frame */
};

/* ---------------------------------------------------------------- options */

static const char *option_value(const char *arg, const char *name)
{
    size_t length = strlen(name);
    return (strncmp(arg, name, length) == 0 && arg[length] == '=') ? arg + length + 1 : NULL;
}

static int parse_language_options(int argc, char **argv, struct language_options *options)
{
    *options = (struct language_options){.channel_fd = -1};
    for (int i = 1; i < argc; i++) {
        const char *value;
        if ((value = option_value(argv[i], "--channel-fd")) != NULL) {
            if ((options->channel_fd = kernel_channel_parse_fd(value)) < 0) {
                fprintf(stderr,
                        "cellbox-kernel: --channel-fd wants a file descriptor number, "
                        "got '%s'\n",
                        value);
                return -1;
            }
        } else if ((value = option_value(argv[i], "--language")) != NULL) {
            options->language = value;
        } else if ((value = option_value(argv[i], "--share-dir")) != NULL && *value != '\0') {
            options->share_dir = value;
        } else {
            fprintf(stderr,
                    "cellbox-kernel: unknown argument '%s' (usage: cellbox-kernel "
                    "--channel-fd=N --language=bash|javascript|typescript "
                    "[--share-dir=DIR])\n",
                    argv[i]);
            return -1;
        }
    }
    if (options->channel_fd < 0) {
        fprintf(stderr, "cellbox-kernel: --language needs --channel-fd=N, the daemon's channel\n");
        return -1;
    }
    if (fcntl(options->channel_fd, F_GETFD) < 0) {
        fprintf(stderr,
                "cellbox-kernel: --channel-fd=%d is not an open file descriptor (%s); the "
                "daemon must pass the channel socket on that fd\n",
                options->channel_fd, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- bytes */

static int bytes_append(struct bytes *buffer, const char *data, size_t length)
{
    if (buffer->used + length > buffer->size) {
        size_t size = buffer->size ? buffer->size : 64 << 10;
        while (size < buffer->used + length)
            size *= 2;
        char *grown = realloc(buffer->data, size);
        if (grown == NULL)
            return -1;
        buffer->data = grown;
        buffer->size = size;
    }
    memcpy(buffer->data + buffer->used, data, length);
    buffer->used += length;
    return 0;
}

static void bytes_consume(struct bytes *buffer, size_t length)
{
    memmove(buffer->data, buffer->data + length, buffer->used - length);
    buffer->used -= length;
}

/* ---------------------------------------------------------------- Node -> daemon */

/* Remembers where Node stands, for the status this process sends after an adoption switch. */
static void note_status(struct node_relay *relay, json_t *frame)
{
    const char *type =
        json_string_value(json_object_get(json_object_get(frame, "header"), "msg_type"));
    if (type == NULL || strcmp(type, "status") != 0)
        return;
    const char *state =
        json_string_value(json_object_get(json_object_get(frame, "content"), "execution_state"));
    relay->last_busy = state != NULL && strcmp(state, "busy") == 0;
    json_decref(relay->last_parent);
    relay->last_parent = json_incref(json_object_get(frame, "parent_header"));
}

/* Node waits for this byte after each frame it writes (channel.js): it is sent once the frame
 * and the output before it are with the daemon. Node reads each before it writes another frame,
 * so our end never has more than one byte queued and the send cannot block; an error means Node
 * is gone, which its end of file or pidfd reports. */
static void acknowledge_frame(struct node_relay *relay)
{
    static const char ack = 1;
    while (send(relay->node_frames, &ack, 1, MSG_NOSIGNAL) < 0 && errno == EINTR)
        ;
}

/* Relays every whole frame Node has written. 0, or -1 when the daemon's channel is gone. A frame
 * that breaks the contract marks Node broken: it is not relayed (the daemon would kill the
 * kernel for it with less to say about why). */
static int relay_node_frames(struct node_relay *relay)
{
    struct bytes *in = &relay->from_node;
    while (in->used >= 4 && !relay->broken) {
        const unsigned char *p = (const unsigned char *)in->data;
        uint32_t length =
            (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        if (length > MAX_FRAME) {
            fprintf(stderr,
                    "cellbox-kernel: Node's kernel sent a %u-byte frame (limit %d "
                    "bytes); ending it\n",
                    length, MAX_FRAME);
            relay->broken = true;
            return 0;
        }
        if (in->used - 4 < length)
            return 0;
        json_t *frame = json_loadb(in->data + 4, length, 0, NULL);
        if (!json_is_object(frame)) {
            fprintf(stderr, "cellbox-kernel: Node's kernel sent a frame that is not a JSON "
                            "object; ending it\n");
            json_decref(frame);
            relay->broken = true;
            return 0;
        }
        /* Noted after the send: a switch found by the send announces the state before it. */
        int sent = kernel_channel_send_raw(relay->channel, in->data + 4, length);
        note_status(relay, frame);
        json_decref(frame);
        bytes_consume(in, 4 + (size_t)length);
        if (sent != 0)
            return -1;
        acknowledge_frame(relay);
    }
    return 0;
}

/* Reads what Node wrote. 1 at its end of file, 0, or -1 when the daemon's channel is gone. */
static int read_from_node(struct node_relay *relay)
{
    static char chunk[CHILD_READ_CHUNK];
    for (;;) {
        ssize_t got = read(relay->node_frames, chunk, sizeof chunk);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (got <= 0)
            return 1;
        if (bytes_append(&relay->from_node, chunk, (size_t)got) != 0 ||
            relay_node_frames(relay) != 0)
            return -1;
        if (relay->broken)
            return 1;
    }
}

/* ---------------------------------------------------------------- daemon -> Node */

static void queue_for_node(void *arg, json_t *frame)
{
    struct node_relay *relay = arg;
    char *json = json_dumps(frame, JSON_COMPACT);
    if (json == NULL)
        return;
    size_t length = strlen(json);
    unsigned char prefix[4] = {length & 0xff, (length >> 8) & 0xff, (length >> 16) & 0xff,
                               (length >> 24) & 0xff};
    if (bytes_append(&relay->to_node, (const char *)prefix, 4) != 0 ||
        bytes_append(&relay->to_node, json, length) != 0)
        fprintf(stderr, "cellbox-kernel: out of memory queueing a request for Node\n");
    free(json);
}

/* Writes what Node can take now; the rest waits for POLLOUT (Node may be busy in a cell while
 * the daemon sends more: blocking here would stop the relay of its output). */
static void write_to_node(struct node_relay *relay)
{
    while (relay->to_node.used > 0) {
        ssize_t written =
            send(relay->node_requests, relay->to_node.data, relay->to_node.used, MSG_NOSIGNAL);
        if (written < 0 && errno == EINTR)
            continue;
        if (written <= 0)
            return; /* EAGAIN, or Node is gone: its end of file or pidfd says so */
        bytes_consume(&relay->to_node, (size_t)written);
    }
}

/* After an adoption switch the new daemon's first frame must be a status saying where the
 * kernel stands (docs/kernel-protocol.md "Adoption", step 3). */
static void announce_after_switch(void *arg)
{
    struct node_relay *relay = arg;
    json_t *request = NULL;
    if (relay->last_busy && json_is_object(relay->last_parent))
        request = json_pack("{s:O}", "header", relay->last_parent);
    json_t *status = jupyter_message_status(&relay->session, request, request ? "busy" : "idle");
    (void)kernel_channel_send(relay->channel, status);
    json_decref(status);
    json_decref(request);
}

/* ---------------------------------------------------------------- the loop */

static _Noreturn void end_like_node(struct node_relay *relay)
{
    if (relay->broken) {
        /* Node's kernel broke the contract: not its own end, so not its status either. */
        kill(relay->node.pid, SIGKILL);
        (void)waitpid(relay->node.pid, NULL, 0);
        exit(1);
    }
    struct pollfd exited = {.fd = relay->node.pidfd, .events = POLLIN};
    if (poll(&exited, 1, CHILD_EXIT_WAIT_MS) == 0) {
        fprintf(stderr,
                "cellbox-kernel: Node closed its channel but did not exit in %d s; "
                "killing it\n",
                CHILD_EXIT_WAIT_MS / 1000);
        kill(relay->node.pid, SIGKILL);
    }
    kernel_child_exit_like(&relay->node);
}

static int relay_until_the_end(struct node_relay *relay)
{
    for (;;) {
        struct pollfd fds[4] = {
            {.fd = kernel_channel_fd(relay->channel), .events = POLLIN},
            {.fd = relay->node_frames, .events = POLLIN},
            {.fd = relay->node.pidfd, .events = POLLIN},
            /* Watched only while there is something to write: Node never writes on it. */
            {.fd = relay->to_node.used ? relay->node_requests : -1, .events = POLLOUT},
        };
        if (poll(fds, 4, -1) < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (fds[1].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) {
            int end = read_from_node(relay);
            if (end < 0)
                return -1;
            if (end > 0)
                end_like_node(relay);
        }
        if (fds[2].revents & POLLIN) {
            /* Node exited: what it wrote before is still relayed, then we end as it did. */
            if (read_from_node(relay) < 0)
                return -1;
            end_like_node(relay);
        }
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) {
            if (kernel_channel_read(relay->channel, queue_for_node, announce_after_switch, relay) !=
                0)
                return -1;
        }
        if (relay->to_node.used > 0)
            write_to_node(relay);
    }
}

static int run_node(const struct language_options *options, bool typescript)
{
    if (access(NODE_PATH, X_OK) != 0) {
        fprintf(stderr, "cellbox-kernel: " NODE_PATH " is not installed: run `make run` (it "
                        "installs nodejs)\n");
        return 1;
    }
    if (options->share_dir == NULL) {
        fprintf(stderr,
                "cellbox-kernel: --language=%s needs --share-dir=DIR (the directory "
                "holding node/kernel.js)\n",
                options->language);
        return 2;
    }
    char script[PATH_MAX];
    struct stat st;
    int n = snprintf(script, sizeof script, "%s/node/kernel.js", options->share_dir);
    if (n < 0 || (size_t)n >= sizeof script || stat(script, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr,
                "cellbox-kernel: --share-dir=%s holds no node/kernel.js; run `make "
                "build` or point it at build/share/cellbox\n",
                options->share_dir);
        return 2;
    }
    struct node_relay relay = {.last_parent = NULL};
    jupyter_session_init(&relay.session);
    relay.channel = kernel_channel_open(options->channel_fd);
    int requests[2], frames[2];
    if (relay.channel == NULL || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, requests) != 0) {
        fprintf(stderr, "cellbox-kernel: cannot make Node's channel: %s\n", strerror(errno));
        return 1;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, frames) != 0) {
        fprintf(stderr, "cellbox-kernel: cannot make Node's channel: %s\n", strerror(errno));
        return 1;
    }
    /* Only our ends are non-blocking: Node writes its frames and reads our acks on its fd 4
     * with fs.writeSync and fs.readSync, blocking (libuv opens fd 3, never fd 4). */
    int theirs[2] = {requests[1], frames[1]};
    (void)fcntl(requests[0], F_SETFL, fcntl(requests[0], F_GETFL) | O_NONBLOCK);
    (void)fcntl(frames[0], F_SETFL, fcntl(frames[0], F_GETFL) | O_NONBLOCK);
    char *node_argv[] = {NODE_PATH, script, typescript ? "--typescript" : NULL, NULL};
    char why[256];
    if (kernel_child_start(&relay.node, node_argv, theirs, 2, why, sizeof why) != 0) {
        fprintf(stderr, "cellbox-kernel: %s\n", why);
        return 1;
    }
    close(theirs[0]);
    close(theirs[1]);
    relay.node_requests = requests[0];
    relay.node_frames = frames[0];
    relay_until_the_end(&relay);
    /* The daemon is gone: no one is left to serve, so Node goes too. */
    kill(relay.node.pid, SIGKILL);
    (void)waitpid(relay.node.pid, NULL, 0);
    close(relay.node_requests);
    close(relay.node_frames);
    close(relay.node.pidfd);
    kernel_channel_close(relay.channel);
    free(relay.from_node.data);
    free(relay.to_node.data);
    json_decref(relay.last_parent);
    return 0;
}

int language_host_main(int argc, char **argv)
{
    struct language_options options;
    if (parse_language_options(argc, argv, &options) != 0)
        return 2;
    if (strcmp(options.language, "bash") == 0)
        return bash_kernel_run(options.channel_fd);
    if (strcmp(options.language, "javascript") == 0)
        return run_node(&options, false);
    if (strcmp(options.language, "typescript") == 0)
        return run_node(&options, true);
    fprintf(stderr,
            "cellbox-kernel: --language=%s is not one this kernel runs (bash, javascript, "
            "typescript); other languages run through --jupyter\n",
            options.language);
    return 2;
}
