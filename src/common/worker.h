/* worker — bulk work off the loop: a few threads that copy and hash files and memory, and hand
 * each task back to the loop when it is done.
 *
 * The loop must never stand still for long (every sandbox's output, request and WebSocket waits
 * on it), and a snapshot moves hundreds of MiB: the kernel's pages into its image, the workspace
 * into the snapshot's folder, every byte through the seal's HMAC. Those steps run here. A task's
 * work touches only what it was handed and owns alone until it is done — descriptors it keeps
 * open, buffers it was given, paths — never a loop watch, a timer, a kernel or box, nor a
 * jansson object the loop holds, and it does not log: the loop reads the outcome the task left
 * in its own memory when `done` runs. Completion comes back through an eventfd the loop watches,
 * so `done` runs on the loop, in the order tasks finished.
 *
 * Up to WORKER_THREADS threads are started as tasks wait (none before the first task), so a
 * fork's image does not queue behind a large snapshot's workspace copy. They live until the
 * daemon exits, with every signal blocked (signals are the loop's, through its signalfd).
 *
 * Verbs: worker_submit, worker_stop. */
#ifndef CELLBOX_COMMON_WORKER_H
#define CELLBOX_COMMON_WORKER_H

#include "common/loop.h"

#define WORKER_THREADS 4
#define WORKER_STOP_WAIT_S 30

/* Runs work(arg) on a worker thread, then done(arg) on the loop (never before this returns).
   Neither may free arg while the other has yet to run. Dies when no thread or eventfd can be
   made at all (the daemon cannot snapshot without them). */
void worker_submit(loop_callback work, loop_callback done, void *arg);

/* Called once at shutdown, after the sandboxes ended: no task starts any more, and the ones
   under way finish their work (at most WORKER_STOP_WAIT_S, then a warning) before the daemon
   exits, so that none is cut off mid-write while exit's handlers free what it uses (OpenSSL's,
   among them). Then the `done` of every task that ended runs, here (the sandboxes are gone by
   then: a snapshot fails and answers its request); one still running past the wait is left,
   and the partial snapshot it leaves is removed at the next start. */
void worker_stop(void);

#endif
