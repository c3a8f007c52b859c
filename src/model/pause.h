/* pause — a box paused and resumed with its cgroup's freezer (POST /v1/sandboxes/{id}/pause and
 * /resume, E2B's pause): every process of the sandbox stops where it is, its memory kept, and its
 * TTL stops counting until it resumes. A paused box stays paused across a restart of the daemon
 * (the freezer outlives it). */
#ifndef CELLBOX_MODEL_PAUSE_H
#define CELLBOX_MODEL_PAUSE_H

#include <stddef.h>

typedef struct box box;

/* 0 (also when already so), or -1 with `why` when the freezer refused. */
int box_pause(box *b, char *why, size_t why_size);
int box_resume(box *b, char *why, size_t why_size);

#endif
