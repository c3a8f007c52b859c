/* worker — see worker.h. One queue of tasks to run and one of tasks done, under one mutex;
 * the threads wait on a condition variable, the loop on an eventfd. */
#include "common/worker.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

typedef struct worker_task {
    loop_callback work; /* on a worker thread */
    loop_callback done; /* then on the loop */
    void *arg;
    struct worker_task *next;
} worker_task;

typedef struct task_queue {
    worker_task *head, *tail;
} task_queue;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t task_waiting = PTHREAD_COND_INITIALIZER;
static task_queue to_run, finished; /* both under `lock` */
static pthread_cond_t task_ended = PTHREAD_COND_INITIALIZER;
static int threads, idle_threads; /* under `lock` */
static int running;               /* tasks whose work is under way, under `lock` */
static bool stopping;             /* worker_stop: no task starts any more, under `lock` */
static int finished_fd = -1;      /* eventfd: the loop's side of `finished` */
static loop_watch finished_watch;

static void queue_push(task_queue *queue, worker_task *task)
{
    task->next = NULL;
    if (queue->tail)
        queue->tail->next = task;
    else
        queue->head = task;
    queue->tail = task;
}

static worker_task *queue_take_all(task_queue *queue)
{
    worker_task *all = queue->head;
    queue->head = queue->tail = NULL;
    return all;
}

static worker_task *queue_pop(task_queue *queue)
{
    worker_task *task = queue->head;
    if (task) {
        queue->head = task->next;
        if (!queue->head)
            queue->tail = NULL;
    }
    return task;
}

static void *worker_thread(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&lock);
    for (;;) {
        worker_task *task;
        while (stopping || !(task = queue_pop(&to_run))) {
            idle_threads++;
            pthread_cond_wait(&task_waiting, &lock);
            idle_threads--;
        }
        running++;
        pthread_mutex_unlock(&lock);
        task->work(task->arg);
        pthread_mutex_lock(&lock);
        running--;
        pthread_cond_broadcast(&task_ended);
        queue_push(&finished, task);
        uint64_t one = 1;
        /* An eventfd's counter only adds: the write cannot fail short of a counter at 2^64-1. */
        if (write(finished_fd, &one, sizeof one) < 0)
            abort();
    }
    return NULL;
}

/* The loop's side: every task done since the last wake, in the order they finished. */
static void on_tasks_finished(void *owner, uint32_t events)
{
    (void)owner;
    (void)events;
    uint64_t count;
    if (read(finished_fd, &count, sizeof count) < 0 && errno != EAGAIN)
        log_warn("worker: cannot read its eventfd: %s", strerror(errno));
    pthread_mutex_lock(&lock);
    worker_task *all = queue_take_all(&finished);
    pthread_mutex_unlock(&lock);
    while (all) {
        worker_task *task = all;
        all = all->next;
        task->done(task->arg);
        free(task);
    }
}

/* A thread more, under `lock`. Signals stay blocked in it: SIGTERM and the rest belong to the
   loop's signalfd, and a signal taken on this thread would end the daemon mid-write. */
static void start_thread(void)
{
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    pthread_t thread;
    int error = pthread_create(&thread, NULL, worker_thread, NULL);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    if (error != 0) {
        if (threads == 0)
            die("cannot start a worker thread: %s", strerror(error));
        log_warn("cannot start another worker thread: %s", strerror(error));
        return;
    }
    pthread_detach(thread);
    threads++;
}

void worker_submit(loop_callback work, loop_callback done, void *arg)
{
    if (finished_fd < 0) {
        finished_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (finished_fd < 0)
            die("cannot make the worker's eventfd: %s", strerror(errno));
        loop_watch_add(&finished_watch, finished_fd, EPOLLIN, on_tasks_finished, NULL);
    }
    worker_task *task = malloc(sizeof *task);
    if (!task)
        die("out of memory");
    *task = (worker_task){.work = work, .done = done, .arg = arg};
    pthread_mutex_lock(&lock);
    queue_push(&to_run, task);
    if (idle_threads == 0 && threads < WORKER_THREADS)
        start_thread();
    pthread_cond_signal(&task_waiting);
    pthread_mutex_unlock(&lock);
}

void worker_stop(void)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += WORKER_STOP_WAIT_S;
    pthread_mutex_lock(&lock);
    stopping = true;
    int rc = 0;
    while (running > 0 && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&task_ended, &lock, &deadline);
    int left = running;
    pthread_mutex_unlock(&lock);
    /* The tasks that ended are handed back now, the loop being stopped: their `done` answers
       the requests that wait on them (the HTTP server stops after this, and must find none
       still waiting). */
    if (finished_fd >= 0)
        on_tasks_finished(NULL, 0);
    if (left > 0)
        log_warn("worker: %d task(s) still copying after %d s: the daemon exits without them "
                 "(a partial snapshot is removed at the next start)",
                 left, WORKER_STOP_WAIT_S);
}
