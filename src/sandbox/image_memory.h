/* image_memory — files held in memory on 2 MiB pages, for process images that never reach the
 * disk (a fork's: model/fork.c).
 *
 * A fork's image is written once, at the speed the daemon can allocate its pages, and mapped
 * MAP_PRIVATE by every fork. On 4 KiB pages (a memfd) allocating 110 MiB is 28 000 page
 * allocations, which cost more than copying the data (this 2-core VM: ~60 ms against ~10 ms).
 * So the daemon makes its own tmpfs with huge=always (a per-mount choice: no host-wide setting,
 * /sys/kernel/mm/transparent_hugepage/shmem_enabled may say "never") through the new mount API,
 * never attached anywhere: no one on the host sees it, and it goes with the daemon. Its files
 * are O_TMPFILE: nameless, gone with their last descriptor.
 *
 * Verbs, in the order they are used: image_memory_create (an empty file, writable),
 * image_memory_freeze (the same file, read-only from then on: what the forks are given). */
#ifndef CELLBOX_SANDBOX_IMAGE_MEMORY_H
#define CELLBOX_SANDBOX_IMAGE_MEMORY_H

#include <stddef.h>

/* An empty file in memory, open read-write, close-on-exec: on the daemon's huge-page tmpfs,
   made on the first call; where that cannot be made (no new mount API, no THP in the kernel),
   a memfd (the reason logged once). -1 with `why`. */
int image_memory_create(char *why, size_t why_size);

/* The file in fd, read-only for everyone from now on: a memfd is sealed (F_SEAL_WRITE and the
   rest) and kept, a tmpfs file is reopened read-only and its writable descriptor closed (no
   seals there: the read-only descriptor is the only one left, and its mode is 0600, root's).
   Returns the descriptor to use (fd itself, or the new one), or -1 with `why` (fd closed). */
int image_memory_freeze(int fd, char *why, size_t why_size);

#endif
