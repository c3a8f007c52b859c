/* kernel_channel — the daemon's channel for the kernels written in C (see kernel_channel.h).
 *
 * The fd is non-blocking so that the language host's one poll loop can read what is there and
 * go back to its child; sends block until the frame is written whole (a frame is never left
 * half-written, whatever the daemon's pace). Reads use recvmsg so that a new channel sent with
 * SCM_RIGHTS by a daemon adopting this kernel is seen (docs/kernel-protocol.md "Adoption"; the
 * Python kernel's channel.py does the same). */
#include "runtime/kernel_channel.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum {
    MAX_FRAME = 64 << 20,   /* the contract's limit, both directions */
    READ_CHUNK = 256 << 10, /* one recvmsg */
    MAX_RECEIVED_FDS = 4,   /* more than the one the protocol sends are closed */
    DRAIN_WAIT_MS = 1000, /* the drain rule gives up after this: a stuck daemon must not hang us */
};

struct kernel_channel {
    int fd;            /* the channel: fd 3 in every kernel */
    char *inbox;       /* bytes read and not yet handed over as frames */
    size_t inbox_used; /* bytes in inbox */
    size_t inbox_size; /* bytes allocated */
    /* The handlers of the last kernel_channel_read, which a send uses too (see there). */
    kernel_channel_frame_handler on_frame;
    kernel_channel_switch_handler on_switch;
    void *arg;
    bool reading; /* inside a read: a send from a handler must not read again */
    bool failed;  /* end of file or garbage seen (in a send's read): the next read says so */
};

int kernel_channel_parse_fd(const char *text)
{
    char *end = NULL;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < 0 || value > INT_MAX)
        return -1;
    return (int)value;
}

kernel_channel *kernel_channel_open(int fd)
{
    kernel_channel *channel = calloc(1, sizeof *channel);
    if (channel == NULL)
        return NULL;
    channel->fd = fd;
    /* Children (bash's commands, node, a Jupyter kernel) must never hold the channel: they could
     * write into it, and they would keep it open after this process is gone. */
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return channel;
}

void kernel_channel_close(kernel_channel *channel)
{
    if (channel == NULL)
        return;
    close(channel->fd);
    free(channel->inbox);
    free(channel);
}

int kernel_channel_fd(const kernel_channel *channel)
{
    return channel->fd;
}

/* ---------------------------------------------------------------- reading */

static int inbox_append(kernel_channel *channel, const char *bytes, size_t length)
{
    if (channel->inbox_used + length > channel->inbox_size) {
        size_t size = channel->inbox_size ? channel->inbox_size : READ_CHUNK;
        while (size < channel->inbox_used + length)
            size *= 2;
        char *grown = realloc(channel->inbox, size);
        if (grown == NULL)
            return -1;
        channel->inbox = grown;
        channel->inbox_size = size;
    }
    memcpy(channel->inbox + channel->inbox_used, bytes, length);
    channel->inbox_used += length;
    return 0;
}

static uint32_t frame_length(const char *bytes)
{
    const unsigned char *b = (const unsigned char *)bytes;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Hands over every whole frame in the inbox. -1 when the daemon sent something that is not a
 * frame of a JSON object: a daemon that does that is broken or not a daemon, and a kernel that
 * guessed at the rest would run requests no one sent. */
static int split_frames(kernel_channel *channel, kernel_channel_frame_handler on_frame, void *arg)
{
    size_t offset = 0;
    int result = 0;
    while (channel->inbox_used - offset >= 4) {
        uint32_t length = frame_length(channel->inbox + offset);
        if (length > MAX_FRAME) {
            fprintf(stderr,
                    "cellbox-kernel: the daemon sent a %u-byte frame (limit %d bytes); "
                    "the channel is broken, exiting\n",
                    length, MAX_FRAME);
            result = -1;
            break;
        }
        if (channel->inbox_used - offset - 4 < length)
            break;
        json_error_t error;
        json_t *frame = json_loadb(channel->inbox + offset + 4, length, 0, &error);
        offset += 4 + (size_t)length;
        if (frame == NULL || !json_is_object(frame)) {
            fprintf(stderr,
                    "cellbox-kernel: the daemon sent a frame that is not a JSON object "
                    "(%s); the channel is broken, exiting\n",
                    frame ? "another JSON value" : error.text);
            json_decref(frame);
            result = -1;
            break;
        }
        on_frame(arg, frame);
        json_decref(frame);
    }
    memmove(channel->inbox, channel->inbox + offset, channel->inbox_used - offset);
    channel->inbox_used -= offset;
    return result;
}

/* A new channel came with the marker byte, the last of this read: the frames before it are
 * handed over, half a frame the old daemon left is dropped, and the new socket takes the old
 * one's fd number (dup3 closes the old one, so the daemon's old end sees EOF). */
static int switch_channel(kernel_channel *channel, const int *fds, size_t fd_count,
                          kernel_channel_frame_handler on_frame, void *arg)
{
    if (split_frames(channel, on_frame, arg) != 0)
        return -1;
    if (channel->inbox_used > 0)
        fprintf(stderr,
                "cellbox-kernel: dropping %zu bytes of a frame the previous daemon did "
                "not finish\n",
                channel->inbox_used);
    channel->inbox_used = 0;
    for (size_t i = 1; i < fd_count; i++)
        close(fds[i]);
    if (dup3(fds[0], channel->fd, O_CLOEXEC) < 0) {
        fprintf(stderr, "cellbox-kernel: cannot take the new channel: %s\n", strerror(errno));
        close(fds[0]);
        return -1;
    }
    close(fds[0]);
    (void)fcntl(channel->fd, F_SETFL, fcntl(channel->fd, F_GETFL) | O_NONBLOCK);
    return 0;
}

/* The descriptors an SCM_RIGHTS message carried; their count. */
static size_t received_fds(struct msghdr *message, int *fds)
{
    size_t count = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(message); c != NULL; c = CMSG_NXTHDR(message, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n && count < MAX_RECEIVED_FDS; i++)
            memcpy(&fds[count++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    return count;
}

/* Reads what is there with the stored handlers. 0, or -1 (then also remembered in `failed`). */
static int read_available(kernel_channel *channel)
{
    static char chunk[READ_CHUNK];
    kernel_channel_frame_handler on_frame = channel->on_frame;
    void *arg = channel->arg;
    if (channel->failed)
        return -1;
    for (;;) {
        union {
            struct cmsghdr align;
            char bytes[CMSG_SPACE(MAX_RECEIVED_FDS * sizeof(int))];
        } control;
        struct iovec iov = {.iov_base = chunk, .iov_len = sizeof chunk};
        struct msghdr message = {.msg_iov = &iov,
                                 .msg_iovlen = 1,
                                 .msg_control = control.bytes,
                                 .msg_controllen = sizeof control.bytes};
        ssize_t got = recvmsg(channel->fd, &message, MSG_CMSG_CLOEXEC);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (got < 0 && errno != ECONNRESET) {
            fprintf(stderr, "cellbox-kernel: reading the channel: %s\n", strerror(errno));
            channel->failed = true;
            return -1;
        }
        int fds[MAX_RECEIVED_FDS];
        size_t fd_count = got > 0 ? received_fds(&message, fds) : 0;
        if (fd_count > 0) {
            if (inbox_append(channel, chunk, (size_t)got - 1) != 0 ||
                switch_channel(channel, fds, fd_count, on_frame, arg) != 0) {
                channel->failed = true;
                return -1;
            }
            if (channel->on_switch != NULL)
                channel->on_switch(arg);
            continue;
        }
        /* End of file: the daemon (and its keeper) let go of the kernel. */
        if (got <= 0 || inbox_append(channel, chunk, (size_t)got) != 0 ||
            split_frames(channel, on_frame, arg) != 0) {
            channel->failed = true;
            return -1;
        }
        if ((size_t)got < sizeof chunk)
            return 0; /* the socket had no more: another read would only say EAGAIN */
    }
}

int kernel_channel_read(kernel_channel *channel, kernel_channel_frame_handler on_frame,
                        kernel_channel_switch_handler on_switch, void *arg)
{
    channel->on_frame = on_frame;
    channel->on_switch = on_switch;
    channel->arg = arg;
    channel->reading = true;
    int result = read_available(channel);
    channel->reading = false;
    return result;
}

/* ---------------------------------------------------------------- sending */

static int pipe_pending(int fd)
{
    int pending = 0;
    return ioctl(fd, FIONREAD, &pending) == 0 ? pending : 0;
}

/* The kernel's half of the ordering rule: output written before this frame is read (and
 * published) by the daemon before the frame is. */
static void wait_output_drained(void)
{
    for (int waited = 0; waited < DRAIN_WAIT_MS; waited++) {
        if (pipe_pending(1) == 0 && pipe_pending(2) == 0)
            return;
        struct timespec millisecond = {0, 1000000};
        nanosleep(&millisecond, NULL);
    }
}

static int write_all(int fd, const char *bytes, size_t length)
{
    while (length > 0) {
        /* MSG_NOSIGNAL: a gone daemon is an error to report, not a SIGPIPE to die of. */
        ssize_t written = send(fd, bytes, length, MSG_NOSIGNAL);
        if (written < 0 && errno == EINTR)
            continue;
        if (written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            (void)poll(&p, 1, -1);
            continue;
        }
        if (written < 0)
            return -1;
        bytes += written;
        length -= (size_t)written;
    }
    return 0;
}

int kernel_channel_send_raw(kernel_channel *channel, const char *json, size_t length)
{
    if (length > MAX_FRAME) {
        fprintf(stderr, "cellbox-kernel: not sending a %zu-byte frame (limit %d bytes)\n", length,
                MAX_FRAME);
        return 0; /* the frame is lost, the channel is not */
    }
    unsigned char prefix[4] = {length & 0xff, (length >> 8) & 0xff, (length >> 16) & 0xff,
                               (length >> 24) & 0xff};
    /* A new channel may be waiting: this frame then goes to the new daemon, after the status
     * on_switch sends (docs/kernel-protocol.md "Adoption", step 2). */
    if (channel->on_frame != NULL && !channel->reading) {
        channel->reading = true;
        (void)read_available(channel);
        channel->reading = false;
    }
    wait_output_drained();
    if (write_all(channel->fd, (const char *)prefix, sizeof prefix) != 0 ||
        write_all(channel->fd, json, length) != 0)
        return -1;
    return 0;
}

int kernel_channel_send(kernel_channel *channel, json_t *frame)
{
    char *json = json_dumps(frame, JSON_COMPACT);
    if (json == NULL)
        return -1;
    int result = kernel_channel_send_raw(channel, json, strlen(json));
    free(json);
    return result;
}
