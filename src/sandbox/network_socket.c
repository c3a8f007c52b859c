#include "sandbox/network_socket.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

typedef struct socket_job {
    int supervisor_pidfd;
    int socket;     /* the result, or -1 */
    int error;      /* errno of the step that failed */
    const char *step;
} socket_job;

/* setns changes the namespace of the calling thread only: this thread enters the sandbox's
   network namespace, creates the socket and ends, so the daemon's own threads never leave the
   host's namespace (a failure half-way cannot strand the loop in a sandbox's network). Only
   CLONE_NEWNET is joined: no mount, pid or user namespace, so nothing of the sandbox's files or
   processes is touched. */
static void *create_inside(void *arg)
{
    socket_job *job = arg;
    if (setns(job->supervisor_pidfd, CLONE_NEWNET) < 0) {
        job->error = errno;
        job->step = "enter the sandbox's network namespace";
        return NULL;
    }
    job->socket = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
    if (job->socket < 0) {
        job->error = errno;
        job->step = "create a socket in the sandbox's network namespace";
    }
    return NULL;
}

int network_socket_open(int supervisor_pidfd, char *why, size_t why_size)
{
    socket_job job = {.supervisor_pidfd = supervisor_pidfd, .socket = -1};
    pthread_t thread;
    int error = pthread_create(&thread, NULL, create_inside, &job);
    if (error != 0) {
        snprintf(why, why_size, "cannot start a thread to enter the sandbox's network: %s",
                 strerror(error));
        return -1;
    }
    pthread_join(thread, NULL);
    if (job.socket < 0)
        snprintf(why, why_size, "cannot %s: %s", job.step, strerror(job.error));
    return job.socket;
}
