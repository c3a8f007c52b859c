/* uid_block — the sandbox uids a daemon may hand out, unique on the host whatever the number
 * of daemons. Uids are handed out in blocks of UID_BLOCK_SIZE from UID_BLOCK_BASE; a daemon
 * holds one block for its lifetime by flock(2) on /run/cellbox/uids/<block>.lock (released by
 * any death of the process). The block is recorded in DATA_DIR/uid-block, so the next daemon on
 * the same data directory asks for the same one first. A block is never given out while a
 * process on the host runs under one of its uids (a dead daemon's sandbox left running). */
#ifndef CELLBOX_SANDBOX_UID_BLOCK_H
#define CELLBOX_SANDBOX_UID_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define UID_BLOCK_BASE 200000
#define UID_BLOCK_SIZE 65536
#define UID_BLOCK_COUNT 1024 /* the last uid is 200000 + 2^26 - 1, far below (uid_t)-1 */
#define UID_BLOCK_LOCK_DIR "/run/cellbox/uids"

typedef struct uid_block {
    int number;
    uid_t first;         /* UID_BLOCK_BASE + number * UID_BLOCK_SIZE */
    bool same_as_before; /* the block DATA_DIR/uid-block named (false on a first start) */
    int previous;        /* the block it named, or -1 */
} uid_block;

/* Called once at start, after the data directory is locked: claims a block (the recorded one if
   it is free) and records it. 0, or -1 with a reason. */
int uid_block_claim(const char *data_dir, uid_block *out, char *why, size_t why_size);
/* Which block a uid belongs to, or -1 if it is no sandbox's. */
int uid_block_of(uid_t uid);

#endif
