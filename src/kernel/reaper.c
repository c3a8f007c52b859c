#include "kernel/reaper.h"

#include <stdbool.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"

typedef struct orphan {
    int pidfd;
    loop_watch watch;
    struct orphan *next;
} orphan;

static orphan *orphans;

static void free_orphan(void *arg)
{
    free(arg);
}

static void forget_orphan(orphan *o)
{
    for (orphan **at = &orphans; *at; at = &(*at)->next) {
        if (*at == o) {
            *at = o->next;
            break;
        }
    }
    loop_watch_remove(&o->watch);
    close(o->pidfd);
}

static void on_orphan_exit(void *owner, uint32_t events)
{
    orphan *o = owner;
    siginfo_t info = {0};
    if (waitid(P_PIDFD, (id_t)o->pidfd, &info, WEXITED | WNOHANG) < 0 || info.si_pid != 0) {
        forget_orphan(o);
        loop_defer(free_orphan, o);
    }
}

void reaper_take(int pidfd)
{
    orphan *o = calloc(1, sizeof *o);
    if (!o)
        die("out of memory");
    o->pidfd = pidfd;
    o->next = orphans;
    orphans = o;
    loop_watch_add(&o->watch, pidfd, EPOLLIN, on_orphan_exit, o);
}

void reaper_wait_all(void)
{
    /* Not one blocking wait after another: a sandbox's pid 1 does not finish dying until every
       process of its namespace is reaped, and processes that joined it later (commands, other
       contexts) are our children too. So reap whatever has exited, in any order, until none is
       left (or, for a process that will not die, a few seconds have passed). */
    for (int rounds = 0; orphans && rounds < 500; rounds++) {
        bool progress = false;
        for (orphan *o = orphans, *next; o; o = next) {
            next = o->next;
            siginfo_t info = {0};
            if (waitid(P_PIDFD, (id_t)o->pidfd, &info, WEXITED | WNOHANG) < 0 || info.si_pid != 0) {
                forget_orphan(o);
                free(o);
                progress = true;
            }
        }
        if (!progress)
            usleep(10000);
    }
}
