/* jupyter_bridge — any installed Jupyter kernel (IRkernel, an ipykernel, ...) behind the daemon's
 * channel (docs/kernel-protocol.md): cellbox-kernel writes a connection file, starts the
 * kernelspec's argv as its child and translates between the daemon's frames and the kernel's
 * signed ZMQ messages (jupyter_wire.h). The kernel's iopub `stream` text goes to fd 1/2, as every
 * cellbox kernel's output does, so the daemon orders and limits it like Python's; every other
 * message becomes a frame. The child's end is this process's end (kernel_child.h).
 *
 * Order of events: connection file -> child -> readiness probe (kernel_info_request until a
 * reply and an iopub message for it) -> status starting to the daemon -> relay until the child
 * ends or the daemon's channel closes. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "runtime/jupyter_message.h"
#include "runtime/jupyter_wire.h"
#include "runtime/kernel_channel.h"
#include "runtime/kernel_child.h"
#include "runtime/kernel_runtime.h"

/* msg_ids of the bridge's own requests (readiness probes, interrupt_request): what the kernel
   says about them is for the bridge, never for the daemon. */
#define OWN_PREFIX "cellbox-bridge-"
/* R on a slow machine takes seconds to load IRkernel; past this the kernel is not coming. */
#define START_TIMEOUT_MS 60000
#define PROBE_INTERVAL_MS 100
/* iopub is a SUB socket: messages published before it has joined are lost ("slow joiner"). A
   kernel publishes busy/idle around every kernel_info_request, so one of those arriving proves
   iopub is joined; a kernel that publishes none gets this long after its reply. */
#define IOPUB_JOIN_GRACE_MS 1000
/* A kernel sends a reply on shell, then idle on iopub; the two sockets have no order between them,
   so an idle that arrives first is held until its reply has been relayed (or this long). */
#define HELD_IDLE_MS 500
#define REMEMBERED_REPLIES 8
#define INTERRUPT_DEBOUNCE_MS 500

struct bridge {
    kernel_channel *channel;
    jupyter_wire wire;
    jupyter_session session;
    kernel_child child;
    int interrupt_by_message;    /* --interrupt-mode=message: SIGINT becomes interrupt_request */
    int signal_fd;               /* SIGINT as a descriptor in message mode, else -1 */
    long long last_interrupt_ms; /* when the last interrupt_request went out */
    json_t *busy_parent;         /* header of the request the kernel last said busy for, or NULL */
    json_t *held_idle;           /* an iopub idle waiting for its request's reply, or NULL */
    long long held_since;
    char replied[REMEMBERED_REPLIES][128]; /* msg_ids of the last requests whose reply went out */
    int replied_next;
    unsigned long own_counter;
    char directory[64]; /* the private 0700 directory of the connection file */
    char connection_file[96];
};

static long long now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec * 1000LL + now.tv_nsec / 1000000;
}

static const char *message_type(const json_t *message)
{
    const char *type =
        json_string_value(json_object_get(json_object_get(message, "header"), "msg_type"));
    return type != NULL ? type : "";
}

static const char *parent_id(const json_t *message)
{
    const char *id =
        json_string_value(json_object_get(json_object_get(message, "parent_header"), "msg_id"));
    return id != NULL ? id : "";
}

static int is_about_own_request(const json_t *message)
{
    return strncmp(parent_id(message), OWN_PREFIX, strlen(OWN_PREFIX)) == 0;
}

/* Sends one of the bridge's own requests; its msg_id marks what comes back as ours. */
static void send_own_request(struct bridge *bridge, jupyter_socket socket, const char *type)
{
    json_t *message = jupyter_message_new(&bridge->session, "", type, NULL, json_object());
    char msg_id[64];
    snprintf(msg_id, sizeof msg_id, OWN_PREFIX "%d-%lu", (int)getpid(), ++bridge->own_counter);
    json_object_set_new(json_object_get(message, "header"), "msg_id", json_string(msg_id));
    if (jupyter_wire_send(&bridge->wire, socket, message) != 0)
        fprintf(stderr, "cellbox-kernel: cannot send %s to the kernel\n", type);
    json_decref(message);
}

/* ------------------------------------------------------------------ start */

/* argv[0] as a path: kernelspecs name programs ("R", "python3") as a shell would find them. */
static char *resolve_program(const char *name)
{
    if (strchr(name, '/') != NULL)
        return strdup(name);
    const char *path = getenv("PATH");
    char *copy = strdup(path != NULL ? path : "/usr/local/bin:/usr/bin:/bin");
    char *found = NULL, *save = NULL;
    for (char *dir = strtok_r(copy, ":", &save); dir != NULL && found == NULL;
         dir = strtok_r(NULL, ":", &save)) {
        char candidate[PATH_MAX];
        if (snprintf(candidate, sizeof candidate, "%s/%s", dir, name) < (int)sizeof candidate &&
            access(candidate, X_OK) == 0)
            found = strdup(candidate);
    }
    free(copy);
    return found;
}

/* How many words a message-mode kernel's argv gets in front (see exec_ignoring_interrupts). */
#define WRAPPER_WORDS 4

/* The kernelspec's argv with "{connection_file}" replaced and argv[0] resolved; in message mode
   behind `cellbox-kernel --jupyter --exec-ignoring-interrupts --`, so the kernel starts with
   SIGINT ignored (kernel_child_start sets it back to the default, which would let the daemon's
   SIGINT to the whole group kill a kernel that expects interrupt_request instead). */
static char **kernel_argv(char **spec_argv, int count, const char *connection_file,
                          int ignore_interrupts)
{
    int skip = ignore_interrupts ? WRAPPER_WORDS : 0;
    char **argv = calloc((size_t)(skip + count) + 1, sizeof *argv);
    if (argv != NULL && ignore_interrupts) {
        argv[0] = realpath("/proc/self/exe", NULL);
        argv[1] = strdup("--jupyter");
        argv[2] = strdup("--exec-ignoring-interrupts");
        argv[3] = strdup("--");
    }
    for (int i = 0; argv != NULL && i < count; i++) {
        const char *at = strstr(spec_argv[i], "{connection_file}");
        char **word = &argv[skip + i];
        if (i == 0) {
            *word = resolve_program(spec_argv[0]);
        } else if (at == NULL) {
            *word = strdup(spec_argv[i]);
        } else if (asprintf(word, "%.*s%s%s", (int)(at - spec_argv[i]), spec_argv[i],
                            connection_file, at + strlen("{connection_file}")) < 0) {
            *word = NULL;
        }
        if (*word == NULL || (i == 0 && skip > 0 && argv[0] == NULL)) {
            fprintf(stderr, "cellbox-kernel: cannot start %s: %s\n", spec_argv[i],
                    i == 0 ? "no such program on PATH" : "out of memory");
            for (int j = 0; j < skip + count; j++)
                free(argv[j]);
            free(argv);
            return NULL;
        }
    }
    return argv;
}

/* The message-mode wrapper (see kernel_argv): SIGINT ignored, which exec keeps, then the kernel. */
static int exec_ignoring_interrupts(char **argv)
{
    signal(SIGINT, SIG_IGN);
    execv(argv[0], argv);
    fprintf(stderr, "cellbox-kernel: cannot run %s: %s\n", argv[0], strerror(errno));
    return 127;
}

static void remove_connection_file(struct bridge *bridge)
{
    if (bridge->connection_file[0] != '\0')
        unlink(bridge->connection_file);
    if (bridge->directory[0] != '\0')
        rmdir(bridge->directory);
    bridge->connection_file[0] = bridge->directory[0] = '\0';
}

static int start_kernel(struct bridge *bridge, char **spec_argv, int count)
{
    char why[256] = "";
    strcpy(bridge->directory, "/tmp/cellbox-jupyter-XXXXXX");
    if (mkdtemp(bridge->directory) == NULL) { /* 0700: the key is for this user only */
        fprintf(stderr, "cellbox-kernel: cannot make a directory under /tmp: %s\n",
                strerror(errno));
        bridge->directory[0] = '\0';
        return -1;
    }
    snprintf(bridge->connection_file, sizeof bridge->connection_file, "%s/connection.json",
             bridge->directory);
    const char *slash = strrchr(spec_argv[0], '/');
    if (jupyter_wire_open(&bridge->wire, why, sizeof why) != 0 ||
        jupyter_wire_write_connection_file(&bridge->wire, bridge->connection_file,
                                           slash != NULL ? slash + 1 : spec_argv[0], why,
                                           sizeof why) != 0) {
        fprintf(stderr, "cellbox-kernel: %s\n", why);
        return -1;
    }
    char **argv =
        kernel_argv(spec_argv, count, bridge->connection_file, bridge->interrupt_by_message);
    if (argv == NULL)
        return -1;
    int rc = kernel_child_start(&bridge->child, argv, NULL, 0, why, sizeof why);
    if (rc != 0)
        fprintf(stderr, "cellbox-kernel: cannot start %s: %s\n", argv[0], why);
    for (int i = 0; argv[i] != NULL; i++)
        free(argv[i]);
    free(argv);
    return rc;
}

/* ------------------------------------------------------------------ kernel -> daemon */

/* Writes all of `text` to fd 1 or 2, waiting while the daemon's pipe is full. */
static void write_output(int fd, const char *text, size_t length)
{
    while (length > 0) {
        ssize_t written = write(fd, text, length);
        if (written > 0) {
            text += written, length -= (size_t)written;
        } else if (written < 0 && (errno == EAGAIN || errno == EINTR)) {
            struct pollfd pollfd = {.fd = fd, .events = POLLOUT};
            poll(&pollfd, 1, 1000);
        } else {
            return; /* the daemon is gone: the channel's end of file ends us */
        }
    }
}

/* Remembers what the kernel is busy with, for the status an adoption switch must send. */
static void track_status(struct bridge *bridge, const json_t *message)
{
    const char *state =
        json_string_value(json_object_get(json_object_get(message, "content"), "execution_state"));
    if (state == NULL)
        return;
    json_decref(bridge->busy_parent);
    bridge->busy_parent = NULL;
    if (strcmp(state, "busy") == 0)
        bridge->busy_parent = json_deep_copy(json_object_get(message, "parent_header"));
}

static void send_frame(struct bridge *bridge, const char *channel, json_t *message)
{
    json_object_set_new(message, "channel", json_string(channel));
    if (kernel_channel_send(bridge->channel, message) != 0)
        fprintf(stderr, "cellbox-kernel: the daemon's channel is gone\n");
}

static void release_held_idle(struct bridge *bridge)
{
    if (bridge->held_idle == NULL)
        return;
    send_frame(bridge, "iopub", bridge->held_idle);
    json_decref(bridge->held_idle);
    bridge->held_idle = NULL;
}

static int reply_was_relayed(const struct bridge *bridge, const char *request_id)
{
    for (int i = 0; i < REMEMBERED_REPLIES; i++)
        if (request_id[0] != '\0' && strcmp(bridge->replied[i], request_id) == 0)
            return 1;
    return 0;
}

/* A reply (shell, control) or input_request (stdin): then the idle it may have overtaken. */
static void relay_reply(struct bridge *bridge, const char *channel, json_t *message)
{
    send_frame(bridge, channel, message);
    if (strcmp(channel, "stdin") == 0)
        return;
    snprintf(bridge->replied[bridge->replied_next], sizeof bridge->replied[0], "%s",
             parent_id(message));
    bridge->replied_next = (bridge->replied_next + 1) % REMEMBERED_REPLIES;
    if (bridge->held_idle != NULL && strcmp(parent_id(bridge->held_idle), parent_id(message)) == 0)
        release_held_idle(bridge);
}

/* An iopub message: a status idle whose reply has not gone out yet is held back. */
static void relay_published(struct bridge *bridge, json_t *message)
{
    release_held_idle(bridge);
    const char *state =
        json_string_value(json_object_get(json_object_get(message, "content"), "execution_state"));
    if (state != NULL && strcmp(state, "idle") == 0 && parent_id(message)[0] != '\0' &&
        !reply_was_relayed(bridge, parent_id(message))) {
        bridge->held_idle = json_incref(message);
        bridge->held_since = now_ms();
        return;
    }
    send_frame(bridge, "iopub", message);
}

static void handle_iopub(struct bridge *bridge, json_t *message)
{
    const char *type = message_type(message);
    const json_t *content = json_object_get(message, "content");
    if (strcmp(type, "stream") == 0) {
        const char *name = json_string_value(json_object_get(content, "name"));
        const json_t *text = json_object_get(content, "text");
        if (json_is_string(text))
            write_output(name != NULL && strcmp(name, "stderr") == 0 ? 2 : 1,
                         json_string_value(text), json_string_length(text));
        return;
    }
    if (strcmp(type, "status") == 0) {
        const char *state = json_string_value(json_object_get(content, "execution_state"));
        if (state != NULL && strcmp(state, "starting") == 0)
            return; /* the bridge said starting once, when the kernel could take requests */
    }
    relay_published(bridge, message);
    /* Noted after the send: a switch taken inside it (kernel_channel_send looks for a new
       channel first) must announce the state before this status, which follows it. */
    if (strcmp(type, "status") == 0)
        track_status(bridge, message);
}

/* Handles every message waiting on `socket`. */
static void drain_socket(struct bridge *bridge, jupyter_socket socket)
{
    static const char *const channels[] = {"shell", "control", "stdin", "iopub"};
    json_t *message = NULL;
    int rc;
    /* Bounded: a kernel flooding iopub must not starve the daemon's channel. */
    for (int i = 0; i < 256 && (rc = jupyter_wire_receive(&bridge->wire, socket, &message)) != 0;
         i++) {
        if (rc < 0)
            continue;
        if (!is_about_own_request(message)) {
            if (socket == JUPYTER_IOPUB)
                handle_iopub(bridge, message);
            else
                relay_reply(bridge, channels[socket], message);
        }
        json_decref(message);
        message = NULL;
    }
}

/* ------------------------------------------------------------------ daemon -> kernel */

static void on_daemon_frame(void *arg, json_t *frame)
{
    struct bridge *bridge = arg;
    const char *channel = json_string_value(json_object_get(frame, "channel"));
    jupyter_socket socket;
    if (channel == NULL)
        return;
    if (strcmp(channel, "shell") == 0)
        socket = JUPYTER_SHELL;
    else if (strcmp(channel, "control") == 0)
        socket = JUPYTER_CONTROL;
    else if (strcmp(channel, "stdin") == 0)
        socket = JUPYTER_STDIN;
    else
        return; /* "cellbox": a running Jupyter kernel's environment cannot be changed (see
                   docs/languages.md); other channels are not ours to send on */
    if (jupyter_wire_send(&bridge->wire, socket, frame) != 0)
        fprintf(stderr, "cellbox-kernel: cannot send %s to the kernel: %s\n", message_type(frame),
                zmq_strerror(zmq_errno()));
}

/* A new daemon adopted us: its first frame must say what the kernel is doing. */
static void on_daemon_switch(void *arg)
{
    struct bridge *bridge = arg;
    json_t *request =
        bridge->busy_parent != NULL ? json_pack("{s:O}", "header", bridge->busy_parent) : NULL;
    json_t *status =
        jupyter_message_status(&bridge->session, request, request != NULL ? "busy" : "idle");
    kernel_channel_send(bridge->channel, status);
    json_decref(status);
    json_decref(request);
}

/* ------------------------------------------------------------------ the loops */

static int child_has_ended(const struct bridge *bridge)
{
    struct pollfd pollfd = {.fd = bridge->child.pidfd, .events = POLLIN};
    return poll(&pollfd, 1, 0) > 0;
}

/* Probes until the kernel answers on shell and iopub, and control and stdin are connected. 0, or -1
   when the child ended (the caller ends like it) or the time ran out. */
static int wait_until_ready(struct bridge *bridge)
{
    long long started = now_ms(), last_probe = 0, replied_at = 0;
    int iopub_joined = 0;
    while (!(replied_at != 0 && (iopub_joined || now_ms() - replied_at >= IOPUB_JOIN_GRACE_MS) &&
             jupyter_wire_connected(&bridge->wire))) {
        if (child_has_ended(bridge))
            return -1;
        if (now_ms() - started >= START_TIMEOUT_MS) {
            fprintf(stderr,
                    "cellbox-kernel: the Jupyter kernel did not answer kernel_info_request "
                    "within %d s; stopping it (is its kernelspec's argv right? its own "
                    "output is above)\n",
                    START_TIMEOUT_MS / 1000);
            return -1;
        }
        if (replied_at == 0 && now_ms() - last_probe >= PROBE_INTERVAL_MS) {
            send_own_request(bridge, JUPYTER_SHELL, "kernel_info_request");
            last_probe = now_ms();
        }
        zmq_pollitem_t items[] = {{bridge->wire.sockets[JUPYTER_SHELL], 0, ZMQ_POLLIN, 0},
                                  {bridge->wire.sockets[JUPYTER_IOPUB], 0, ZMQ_POLLIN, 0},
                                  {NULL, bridge->child.pidfd, ZMQ_POLLIN, 0}};
        zmq_poll(items, 3, PROBE_INTERVAL_MS / 2);
        json_t *message = NULL;
        while (jupyter_wire_receive(&bridge->wire, JUPYTER_SHELL, &message) != 0) {
            if (message != NULL && replied_at == 0 && is_about_own_request(message))
                replied_at = now_ms();
            json_decref(message);
            message = NULL;
        }
        while (jupyter_wire_receive(&bridge->wire, JUPYTER_IOPUB, &message) != 0) {
            if (message != NULL && is_about_own_request(message))
                iopub_joined = 1;
            /* Before `starting` the daemon takes no frame; what the kernel prints still counts. */
            else if (message != NULL && strcmp(message_type(message), "stream") == 0)
                handle_iopub(bridge, message);
            json_decref(message);
            message = NULL;
        }
    }
    return 0;
}

/* SIGINT under --interrupt-mode=message: the kernel gets interrupt_request instead. One per
   INTERRUPT_DEBOUNCE_MS: ipykernel answers interrupt_request with SIGINT to its whole process
   group, the bridge included, which must not turn into a second request, and a third... */
static void handle_interrupt_signal(struct bridge *bridge)
{
    struct signalfd_siginfo info;
    int signalled = 0;
    while (read(bridge->signal_fd, &info, sizeof info) == (ssize_t)sizeof info)
        signalled = 1;
    if (signalled && now_ms() - bridge->last_interrupt_ms >= INTERRUPT_DEBOUNCE_MS) {
        send_own_request(bridge, JUPYTER_CONTROL, "interrupt_request");
        bridge->last_interrupt_ms = now_ms();
    }
}

/* Relays until the child ends (returns 1) or the daemon's channel closes (returns 0). */
static int relay(struct bridge *bridge)
{
    for (;;) {
        zmq_pollitem_t items[] = {{bridge->wire.sockets[JUPYTER_SHELL], 0, ZMQ_POLLIN, 0},
                                  {bridge->wire.sockets[JUPYTER_CONTROL], 0, ZMQ_POLLIN, 0},
                                  {bridge->wire.sockets[JUPYTER_STDIN], 0, ZMQ_POLLIN, 0},
                                  {bridge->wire.sockets[JUPYTER_IOPUB], 0, ZMQ_POLLIN, 0},
                                  {NULL, kernel_channel_fd(bridge->channel), ZMQ_POLLIN, 0},
                                  {NULL, bridge->child.pidfd, ZMQ_POLLIN, 0},
                                  {NULL, bridge->signal_fd, ZMQ_POLLIN, 0}};
        int count = bridge->signal_fd >= 0 ? 7 : 6;
        if (zmq_poll(items, count, bridge->held_idle != NULL ? HELD_IDLE_MS / 5 : -1) < 0 &&
            zmq_errno() != EINTR)
            return 0;
        if (bridge->held_idle != NULL && now_ms() - bridge->held_since >= HELD_IDLE_MS)
            release_held_idle(bridge);
        /* iopub first: a reply's busy/output/idle were published before the reply was sent. */
        drain_socket(bridge, JUPYTER_IOPUB);
        for (int socket = JUPYTER_SHELL; socket <= JUPYTER_STDIN; socket++)
            if (items[socket].revents & ZMQ_POLLIN)
                drain_socket(bridge, (jupyter_socket)socket);
        if ((items[4].revents & ZMQ_POLLIN) &&
            kernel_channel_read(bridge->channel, on_daemon_frame, on_daemon_switch, bridge) != 0)
            return 0;
        if (count == 7 && (items[6].revents & ZMQ_POLLIN))
            handle_interrupt_signal(bridge);
        if (items[5].revents & ZMQ_POLLIN)
            return 1;
    }
}

/* What the kernel said before it ended (a shutdown_reply, its last output) still reaches the
   daemon: iopub and the reply sockets are read until they stay empty for a moment. */
static void relay_last_messages(struct bridge *bridge)
{
    for (int round = 0; round < 20; round++) {
        zmq_pollitem_t items[JUPYTER_SOCKET_COUNT];
        for (int i = 0; i < JUPYTER_SOCKET_COUNT; i++)
            items[i] = (zmq_pollitem_t){bridge->wire.sockets[i], 0, ZMQ_POLLIN, 0};
        if (zmq_poll(items, JUPYTER_SOCKET_COUNT, 50) <= 0)
            return;
        drain_socket(bridge, JUPYTER_IOPUB);
        for (int socket = JUPYTER_SHELL; socket <= JUPYTER_STDIN; socket++)
            drain_socket(bridge, (jupyter_socket)socket);
    }
    release_held_idle(bridge);
}

/* ------------------------------------------------------------------ main */

static int parse_arguments(int argc, char **argv, int *channel_fd, int *by_message, int *first)
{
    *channel_fd = -1, *by_message = 0, *first = argc;
    int wrapper = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            *first = i + 1;
            break;
        }
        if (strncmp(argv[i], "--channel-fd=", 13) == 0)
            *channel_fd = kernel_channel_parse_fd(argv[i] + 13);
        else if (strcmp(argv[i], "--interrupt-mode=message") == 0)
            *by_message = 1;
        else if (strcmp(argv[i], "--exec-ignoring-interrupts") == 0)
            wrapper = 1;
        else if (strcmp(argv[i], "--interrupt-mode=signal") != 0 &&
                 strcmp(argv[i], "--jupyter") != 0)
            fprintf(stderr, "cellbox-kernel: --jupyter ignores %s\n", argv[i]);
    }
    if (wrapper && *first < argc)
        exit(exec_ignoring_interrupts(argv + *first));
    if (*channel_fd < 0 || *first >= argc) {
        fprintf(stderr, "usage: cellbox-kernel --channel-fd=N --jupyter "
                        "[--interrupt-mode=signal|message] -- KERNEL-ARGV...\n");
        return -1;
    }
    return 0;
}

/* In message mode SIGINT is blocked before the child starts, so the kernel (which inherits the
   mask) does not die of the signal the daemon sends the whole group; the bridge reads it from a
   signalfd instead. */
static int catch_interrupts(struct bridge *bridge)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0)
        return -1;
    bridge->signal_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return bridge->signal_fd >= 0 ? 0 : -1;
}

int jupyter_bridge_main(int argc, char **argv)
{
    struct bridge bridge = {.signal_fd = -1, .child = {.pid = -1, .pidfd = -1}};
    int channel_fd, first;
    if (parse_arguments(argc, argv, &channel_fd, &bridge.interrupt_by_message, &first) != 0)
        return 2;
    jupyter_session_init(&bridge.session);
    bridge.channel = kernel_channel_open(channel_fd);
    if (bridge.channel == NULL || (bridge.interrupt_by_message && catch_interrupts(&bridge) != 0)) {
        fprintf(stderr, "cellbox-kernel: cannot set up the bridge: %s\n", strerror(errno));
        return 1;
    }
    if (start_kernel(&bridge, argv + first, argc - first) != 0) {
        remove_connection_file(&bridge);
        return 1;
    }
    int ended = wait_until_ready(&bridge) != 0 ? child_has_ended(&bridge) : -1;
    if (ended == 0) { /* timed out: the child is still there */
        kill(bridge.child.pid, SIGKILL);
        remove_connection_file(&bridge);
        return 1;
    }
    if (ended < 0) {
        json_t *starting = jupyter_message_status(&bridge.session, NULL, "starting");
        kernel_channel_send(bridge.channel, starting);
        json_decref(starting);
        ended = relay(&bridge);
    }
    remove_connection_file(&bridge);
    if (ended) {
        relay_last_messages(&bridge);
        kernel_child_exit_like(&bridge.child);
    }
    /* The daemon's channel closed: no one is left to serve. */
    kill(bridge.child.pid, SIGKILL);
    return 0;
}
