#include "sandbox/volume_worker.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"

enum { JOB_CREATE = 1, JOB_DESTROY = 2 };

#define STOP_TIMEOUT_MS 30000

/* A job on the wire: this header, then the image path and the mount point, each ending in NUL
   (one datagram of a SOCK_SEQPACKET pair: never split, never merged). Answers, one per
   creation, come back in the order the creations were sent. */
typedef struct job_header {
    uint32_t op;
    uint32_t kind;
    int32_t keep;
    uint32_t uid, gid;
    long long bytes;
} job_header;

#define MAX_JOB (sizeof(job_header) + 2 * PATH_MAX)

typedef struct job_answer {
    int32_t ok;
    char why[512];
} job_answer;

typedef struct pending_creation {
    volume_made done;
    void *arg;
    struct pending_creation *next;
} pending_creation;

static struct {
    int fd; /* the daemon's end; -1 while no helper runs */
    pid_t pid;
    loop_watch watch;
    pending_creation *pending; /* oldest first: answers come in the order sent */
} worker = {.fd = -1, .watch = {.fd = -1}};

/* ---- the helper ---- */

static void __attribute__((noreturn)) serve_jobs(int fd, pid_t daemon)
{
    prctl(PR_SET_NAME, "cellbox-volumes");
    /* A daemon killed outright takes its helper with it; an orderly stop closes the socket and
       lets it finish first (volume_worker_stop). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != daemon)
        _exit(0);
    /* Ctrl-C reaches the whole process group: the daemon's shutdown still has removals to send
       here, so only the end of the socket stops the helper. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (fd != 3) {
        dup2(fd, 3);
        fd = 3;
    }
    syscall(SYS_close_range, 4, ~0U, 0); /* nothing of the daemon's: listening socket, epoll, ... */
    char *message = malloc(MAX_JOB + 1);
    if (!message)
        _exit(1);
    for (;;) {
        ssize_t n = recv(fd, message, MAX_JOB, 0);
        /* ECONNRESET: the daemon closed its end with answers of ours unread. Said once, before
           the jobs still queued, which are read next. */
        if (n < 0 && (errno == EINTR || errno == ECONNRESET))
            continue;
        if (n <= 0)
            break; /* the daemon is done with us */
        message[n] = '\0';
        job_header header;
        if ((size_t)n < sizeof header)
            continue;
        memcpy(&header, message, sizeof header);
        const char *image = message + sizeof header;
        const char *mount_point = image + strlen(image) + 1;
        if (mount_point >= message + n)
            continue; /* malformed: cannot come from our own daemon */
        if (header.op == JOB_DESTROY) {
            volume_destroy(image, mount_point, header.keep);
            continue;
        }
        job_answer answer = {0};
        answer.ok = volume_create((volume_kind)header.kind, image, mount_point, header.bytes,
                                  header.uid, header.gid, answer.why, sizeof answer.why) == 0;
        /* Unread once the daemon stops (it closed its end): the jobs still queued are done all
           the same, the removals among them most of all. */
        (void)send(fd, &answer, sizeof answer, MSG_NOSIGNAL);
    }
    volume_shutdown(); /* the templates this helper made */
    _exit(0);
}

/* ---- the daemon's side ---- */

/* Every creation still unanswered: told `why` it failed, or (NULL) just forgotten. */
static void end_pending(const char *why)
{
    while (worker.pending) {
        pending_creation *p = worker.pending;
        worker.pending = p->next;
        if (why)
            p->done(p->arg, false, why);
        free(p);
    }
}

/* The helper is gone (or its socket broke): from now on the daemon does the work itself. */
static void lose_worker(const char *why)
{
    if (worker.fd < 0)
        return;
    log_warn("the volume helper (pid %d) %s; workspace volumes are made in the daemon from now on",
             (int)worker.pid, why);
    loop_watch_remove(&worker.watch);
    close(worker.fd);
    worker.fd = -1;
    kill(worker.pid, SIGKILL);
    waitpid(worker.pid, NULL, 0);
    end_pending("the volume helper is gone");
}

static void on_answers(void *owner, uint32_t events)
{
    (void)owner;
    (void)events;
    for (;;) {
        job_answer answer;
        ssize_t n = recv(worker.fd, &answer, sizeof answer, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            lose_worker(n == 0 || errno == ECONNRESET ? "exited" : "cannot be read from");
            return;
        }
        if (n != (ssize_t)sizeof answer) {
            lose_worker("sent a broken answer");
            return;
        }
        pending_creation *p = worker.pending;
        if (!p) {
            lose_worker("answered a creation never sent");
            return;
        }
        worker.pending = p->next;
        answer.why[sizeof answer.why - 1] = '\0';
        p->done(p->arg, answer.ok != 0, answer.why);
        free(p);
    }
}

int volume_worker_start(void)
{
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
        return -1;
    pid_t daemon = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(pair[0]);
        close(pair[1]);
        return -1;
    }
    if (pid == 0) {
        close(pair[0]);
        serve_jobs(pair[1], daemon);
    }
    close(pair[1]);
    worker.fd = pair[0];
    worker.pid = pid;
    loop_watch_add(&worker.watch, worker.fd, EPOLLIN, on_answers, NULL);
    log_debug("volume helper started (pid %d)", (int)pid);
    return 0;
}

bool volume_worker_running(void) { return worker.fd >= 0; }

/* One job in one datagram; false if it could not be sent (the caller then does it itself). */
static bool send_job(const job_header *header, const char *image, const char *mount_point)
{
    size_t image_length = strlen(image) + 1, mount_length = strlen(mount_point) + 1;
    if (worker.fd < 0 || image_length > PATH_MAX || mount_length > PATH_MAX)
        return false;
    char message[MAX_JOB];
    memcpy(message, header, sizeof *header);
    memcpy(message + sizeof *header, image, image_length);
    memcpy(message + sizeof *header + image_length, mount_point, mount_length);
    size_t length = sizeof *header + image_length + mount_length;
    ssize_t n;
    do
        n = send(worker.fd, message, length, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n == (ssize_t)length)
        return true;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return false; /* hundreds of jobs behind: this one is quicker done here */
    lose_worker("cannot be written to");
    return false;
}

bool volume_worker_create(volume_kind kind, const char *image, const char *mount_point,
                          long long bytes, uid_t uid, gid_t gid, volume_made done, void *arg)
{
    job_header header = {.op = JOB_CREATE, .kind = (uint32_t)kind, .uid = uid, .gid = gid,
                         .bytes = bytes};
    if (!send_job(&header, image, mount_point))
        return false;
    if (kind == VOLUME_EXT4)
        volume_note_template(image, bytes); /* removed at shutdown even if the helper dies */
    pending_creation *p = calloc(1, sizeof *p);
    if (!p)
        die("out of memory");
    *p = (pending_creation){.done = done, .arg = arg};
    pending_creation **tail = &worker.pending;
    while (*tail)
        tail = &(*tail)->next;
    *tail = p;
    return true;
}

void volume_worker_destroy(const char *image, const char *mount_point, int keep)
{
    job_header header = {.op = JOB_DESTROY, .keep = keep};
    if (!send_job(&header, image, mount_point))
        volume_destroy(image, mount_point, keep);
}

void volume_worker_stop(void)
{
    if (worker.fd < 0)
        return;
    loop_watch_remove(&worker.watch);
    /* The end of its jobs: it reads those still queued, does them, then exits. Closed, not
       shut down for writing: an answer it could not send then never blocks it. */
    close(worker.fd);
    worker.fd = -1;
    /* Bounded: a helper stuck on a hung disk must not keep the daemon from stopping. */
    for (int waited_ms = 0; waitpid(worker.pid, NULL, WNOHANG) == 0; waited_ms += 10) {
        if (waited_ms >= STOP_TIMEOUT_MS) {
            log_warn("the volume helper (pid %d) did not finish its removals in %d s; killing it "
                     "(workspace mounts may be left under the data directory)",
                     (int)worker.pid, STOP_TIMEOUT_MS / 1000);
            kill(worker.pid, SIGKILL);
            waitpid(worker.pid, NULL, 0);
            break;
        }
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    end_pending(NULL); /* answered after the loop stopped: nobody is waiting any more */
}
