/* checkpoint_point — where a Python kernel stops itself to be imaged, and where a restored copy
 * of it comes back to life (docs/architecture.md, "Checkpoints").
 *
 * The kernel calls checkpoint_point(3) between requests, when the daemon asks ({"channel":
 * "cellbox", "type": "checkpoint"}). It refuses unless the process has one thread and runs on
 * x86_64. Else it records in its own memory (checkpoint_state below) what only the process can
 * see — every signal action and its mask, its working directory, its fs base (the TLS pointer),
 * its open files — saves its registers (context_switch.h), says {"type": "checkpoint_ready",
 * "report": ...} on the channel and blocks until the daemon, having read its memory, says
 * "checkpoint_done". It returns then, unchanged.
 *
 * A restore (restorer.h) puts that memory back into a clone of the same zygote in a new sandbox
 * and jumps into the saved registers: checkpoint_point "returns a second time", in the new
 * process. It unmaps the restorer's scratch memory, re-applies the signal actions and mask and
 * the working directory, reopens the files it can carry (regular files and directories, by path,
 * at the same numbers and offsets) and returns with the report of what it reopened and what it
 * could not carry (pipes, sockets, child processes). */
#ifndef CELLBOX_RUNTIME_CHECKPOINT_POINT_H
#define CELLBOX_RUNTIME_CHECKPOINT_POINT_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/context_switch.h"

/* What the restorer needs of the checkpointed process, at the same address in every clone of
   the zygote (a static of cellbox-kernel's): read only once the image is back in place. */
typedef struct checkpoint_resume {
    saved_context context;
    uint64_t fs_base;   /* arch_prctl(ARCH_GET_FS) at the checkpoint */
} checkpoint_resume;

const checkpoint_resume *checkpoint_point_resume(void);

/* The outcome of one call: CHECKPOINT_REFUSED (`text`: why), CHECKPOINT_GOES_ON (the original
   process, imaged; `text`: a frame the daemon sent instead of "checkpoint_done", to be handled,
   or ""), CHECKPOINT_RESTORED (a restored copy; `text`: its report, JSON). `text` is malloc'd. */
typedef enum checkpoint_outcome {
    CHECKPOINT_REFUSED,
    CHECKPOINT_GOES_ON,
    CHECKPOINT_RESTORED,
} checkpoint_outcome;

checkpoint_outcome checkpoint_point(int channel_fd, char **text);

/* The value context_resume passes: the address of the restorer's scratch mapping, whose first
   word is its length (checkpoint_point unmaps it). */
typedef struct checkpoint_scratch_header {
    uint64_t length;
} checkpoint_scratch_header;

#endif
