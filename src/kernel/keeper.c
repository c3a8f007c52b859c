#include "kernel/keeper.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

/* One SOCK_SEQPACKET datagram per message (never split, never merged): a letter, a space, an
   argument; descriptors ride along with SCM_RIGHTS.
     daemon → keeper   "H <id>" + fds   hold these for kernel <id> (replacing any)
                       "D <id>"         drop kernel <id>'s
                       "L"              list: the keeper answers "E <id>" + fds for each, then
                                        "Z <µs>" (when the previous daemon went away; 0 if none)
                       "S"              stop: exit now */
#define MESSAGE_MAX 128

static int connection = -1; /* to the keeper, in the daemon */

static int send_message(int fd, const char *text, const int *fds, size_t fd_count)
{
    struct iovec iov = {.iov_base = (void *)text, .iov_len = strlen(text)};
    union {
        char buffer[CMSG_SPACE(sizeof(int) * KEEPER_FDS)];
        struct cmsghdr align;
    } control = {0};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    int valid[KEEPER_FDS];
    size_t count = 0;
    for (size_t i = 0; i < fd_count && i < KEEPER_FDS; i++)
        if (fds[i] >= 0)
            valid[count++] = fds[i];
    if (count > 0) {
        msg.msg_control = control.buffer;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
        struct cmsghdr *header = CMSG_FIRSTHDR(&msg);
        header->cmsg_level = SOL_SOCKET;
        header->cmsg_type = SCM_RIGHTS;
        header->cmsg_len = CMSG_LEN(sizeof(int) * count);
        memcpy(CMSG_DATA(header), valid, sizeof(int) * count);
    }
    ssize_t n;
    do
        n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)iov.iov_len ? 0 : -1;
}

/* A message into `text` (NUL-terminated) and its descriptors into fds (the rest -1); its
   length, 0 at end of file, -1 on error. */
static ssize_t receive_message(int fd, char text[MESSAGE_MAX], int fds[KEEPER_FDS])
{
    struct iovec iov = {.iov_base = text, .iov_len = MESSAGE_MAX - 1};
    union {
        char buffer[CMSG_SPACE(sizeof(int) * KEEPER_FDS)];
        struct cmsghdr align;
    } control;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buffer,
                         .msg_controllen = sizeof control.buffer};
    for (int i = 0; i < KEEPER_FDS; i++)
        fds[i] = -1;
    ssize_t n;
    do
        n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -1;
    text[n] = '\0';
    size_t count = 0;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&msg); h; h = CMSG_NXTHDR(&msg, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
            continue;
        size_t in_header = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int *received = (int *)CMSG_DATA(h);
        for (size_t i = 0; i < in_header; i++) {
            if (count < KEEPER_FDS)
                fds[count++] = received[i];
            else
                close(received[i]);
        }
    }
    return n;
}

/* ---- the keeper process ---- */

typedef struct held {
    char id[UUID_STRING_LENGTH + 1];
    int fds[KEEPER_FDS];
} held;

static held *holding;
static size_t holding_count;

static void close_all(int fds[KEEPER_FDS])
{
    for (int i = 0; i < KEEPER_FDS; i++)
        if (fds[i] >= 0)
            close(fds[i]), fds[i] = -1;
}

static void drop_held(const char *id)
{
    for (size_t i = 0; i < holding_count; i++) {
        if (strcmp(holding[i].id, id) != 0)
            continue;
        close_all(holding[i].fds);
        holding[i] = holding[--holding_count];
        return;
    }
}

static void hold(const char *id, int fds[KEEPER_FDS])
{
    drop_held(id);
    held *grown = realloc(holding, (holding_count + 1) * sizeof *holding);
    if (!grown) {
        close_all(fds); /* nothing to do but not keep it */
        return;
    }
    holding = grown;
    held *entry = &holding[holding_count++];
    snprintf(entry->id, sizeof entry->id, "%.36s", id);
    memcpy(entry->fds, fds, sizeof entry->fds);
}

/* Serves one daemon until it goes away or says stop; true for stop. */
static bool serve_daemon(int fd, int64_t *gone_at_us)
{
    for (;;) {
        char text[MESSAGE_MAX];
        int fds[KEEPER_FDS];
        ssize_t n = receive_message(fd, text, fds);
        if (n <= 0)
            return false;
        if (text[0] == 'H' && n > 2) {
            hold(text + 2, fds);
            continue;
        }
        close_all(fds); /* descriptors come with "H" only */
        if (text[0] == 'D' && n > 2) {
            drop_held(text + 2);
        } else if (text[0] == 'L') {
            char line[MESSAGE_MAX];
            for (size_t i = 0; i < holding_count; i++) {
                snprintf(line, sizeof line, "E %s", holding[i].id);
                send_message(fd, line, holding[i].fds, KEEPER_FDS);
            }
            snprintf(line, sizeof line, "Z %lld", (long long)*gone_at_us);
            send_message(fd, line, NULL, 0);
        } else if (text[0] == 'S') {
            return true;
        }
    }
}

static bool peer_is_us(int fd)
{
    struct ucred peer;
    socklen_t length = sizeof peer;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) == 0 && peer.uid == geteuid();
}

static void __attribute__((noreturn)) run_keeper(int listener, const char *pid_path)
{
    prctl(PR_SET_NAME, "cellbox-keeper");
    /* Its own session: the daemon's process group (Ctrl-C, a service manager's kill) does not
       reach it, and no parent-death signal: outliving the daemon is its purpose. */
    setsid();
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (listener != 3) {
        dup2(listener, 3);
        listener = 3;
    }
    /* Nothing of the daemon's: not the data directory's lock (the next daemon needs it), not
       its uid block's, not its epoll or sockets. */
    syscall(SYS_close_range, 4, ~0U, 0);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
        dup2(devnull, 0), dup2(devnull, 1), dup2(devnull, 2);
        if (devnull > 3)
            close(devnull);
    }
    int64_t gone_at_us = 0;
    for (;;) {
        int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            break;
        }
        if (!peer_is_us(fd)) {
            close(fd);
            continue;
        }
        bool stop = serve_daemon(fd, &gone_at_us);
        close(fd);
        gone_at_us = clock_wall_us();
        if (stop || holding_count == 0)
            break;
    }
    unlink(pid_path);
    _exit(0); /* not exit(): nothing of the daemon's copied state is ours to tear down */
}

/* ---- in the daemon ---- */

static int connect_to(const char *socket_path)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    snprintf(address.sun_path, sizeof address.sun_path, "%s", socket_path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof address) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static int fork_keeper(const char *socket_path, const char *pid_path)
{
    unlink(socket_path); /* a dead keeper's: nobody listens on it (connect_to failed) */
    int listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    snprintf(address.sun_path, sizeof address.sun_path, "%s", socket_path);
    if (listener < 0 || bind(listener, (struct sockaddr *)&address, sizeof address) < 0 ||
        chmod(socket_path, 0600) < 0 || listen(listener, 4) < 0) {
        log_warn("cannot listen on %s: %s", socket_path, strerror(errno));
        if (listener >= 0)
            close(listener);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0)
        run_keeper(listener, pid_path);
    close(listener);
    if (pid < 0)
        return -1;
    FILE *f = fopen(pid_path, "we");
    if (f) {
        fprintf(f, "%d\n", (int)pid);
        fclose(f);
    }
    log_info("keeper started (pid %d): kernels' channels outlive this daemon", (int)pid);
    return connect_to(socket_path);
}

int keeper_start(const char *data_dir)
{
    char socket_path[108], pid_path[4200];
    if (snprintf(socket_path, sizeof socket_path, "%s/keeper.sock", data_dir) >= (int)sizeof socket_path) {
        log_warn("the data directory's path is too long for a unix socket: no keeper; sandboxes "
                 "end with this daemon");
        return -1;
    }
    snprintf(pid_path, sizeof pid_path, "%.4000s/keeper.pid", data_dir);
    connection = connect_to(socket_path);
    if (connection >= 0)
        log_info("keeper of a previous daemon found (%s)", socket_path);
    else
        connection = fork_keeper(socket_path, pid_path);
    return connection >= 0 ? 0 : -1;
}

size_t keeper_take_all(keeper_entry **out, int64_t *daemon_gone_at_us)
{
    *out = NULL;
    *daemon_gone_at_us = 0;
    if (connection < 0 || send_message(connection, "L", NULL, 0) < 0)
        return 0;
    size_t count = 0;
    for (;;) {
        char text[MESSAGE_MAX];
        keeper_entry entry;
        if (receive_message(connection, text, entry.fds) <= 0)
            break;
        if (text[0] == 'Z') {
            *daemon_gone_at_us = atoll(text + 2);
            break;
        }
        keeper_entry *grown = text[0] == 'E' ? realloc(*out, (count + 1) * sizeof **out) : NULL;
        if (!grown) {
            close_all(entry.fds);
            continue;
        }
        *out = grown;
        snprintf(entry.id, sizeof entry.id, "%.36s", text + 2);
        (*out)[count++] = entry;
    }
    return count;
}

bool keeper_running(void) { return connection >= 0; }

void keeper_hold(const char *id, const int fds[KEEPER_FDS])
{
    char text[MESSAGE_MAX];
    snprintf(text, sizeof text, "H %s", id);
    if (connection >= 0 && send_message(connection, text, fds, KEEPER_FDS) < 0)
        log_warn("kernel %s: cannot hand its channel to the keeper: %s (it will not survive a "
                 "restart of the daemon)", id, strerror(errno));
}

void keeper_drop(const char *id)
{
    char text[MESSAGE_MAX];
    snprintf(text, sizeof text, "D %s", id);
    if (connection >= 0)
        send_message(connection, text, NULL, 0);
}

void keeper_stop(void)
{
    if (connection < 0)
        return;
    send_message(connection, "S", NULL, 0);
    close(connection);
    connection = -1;
}

void keeper_detach(void)
{
    if (connection >= 0)
        close(connection);
    connection = -1;
}
