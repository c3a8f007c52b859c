/* image_memory — files held in memory on 2 MiB pages, for process images that never reach the
 * disk (a fork's: model/fork.c), and handed out before they are written.
 *
 * A fork's image is written once, at the speed the daemon can allocate its pages, and mapped
 * MAP_PRIVATE by every fork. On 4 KiB pages (a memfd) allocating 110 MiB is 28 000 page
 * allocations, which cost more than copying the data (this 2-core VM: ~60 ms against ~10 ms).
 * So the daemon makes its own tmpfs with huge=always (a per-mount choice: no host-wide setting,
 * /sys/kernel/mm/transparent_hugepage/shmem_enabled may say "never") through the new mount API,
 * never attached anywhere: no one on the host sees it, and it goes with the daemon. Its files
 * are O_TMPFILE: nameless, gone with their last descriptor.
 *
 * The forks' sandboxes are made while the image is being written (their clone, lockdown and
 * kernel process take as long as the copy): they get a read-only descriptor at once, and the
 * restorer waits on an open-file-description lock (F_OFD_SETLKW, read) that the writer holds
 * (write) until the image is whole (process_image_wait_written, in runtime/restorer.c's planner).
 * A file no one locks (a snapshot's image) is never waited for.
 *
 * Verbs, in the order they are used: image_memory_create (an empty file, writable and locked,
 * and its read-only twin), image_memory_finish (whole: read-only for everyone, readers let go). */
#ifndef CELLBOX_SANDBOX_IMAGE_MEMORY_H
#define CELLBOX_SANDBOX_IMAGE_MEMORY_H

#include <stddef.h>

/* An empty file in memory, open read-write, close-on-exec and write-locked (the readers wait):
   on the daemon's huge-page tmpfs, made on the first call; where that cannot be made (no new
   mount API, no THP in the kernel), a memfd (the reason logged once). `*reader`: the same file
   opened read-only, what the restores are given. -1 with `why`. */
int image_memory_create(int *reader, char *why, size_t why_size);

/* The image in `writer` is whole: a memfd is sealed (F_SEAL_WRITE and the rest); a tmpfs file
   takes no seals, but its mode is 0600 (root's) and its only writable descriptor goes. writer is
   closed, which lets the readers go on. 0, or -1 with `why` (closed all the same). Closing the
   writer without this lets the readers go on to an image half written: stop them first. */
int image_memory_finish(int writer, char *why, size_t why_size);

#endif
