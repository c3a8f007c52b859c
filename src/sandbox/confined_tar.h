/* confined_tar — tar archives of a sandbox's directories, made and unpacked by the daemon through
 * confined.c (libarchive for the format), so an archive can neither read nor write outside the
 * sandbox: the walk never follows a link, entries are created beneath the root as the sandbox
 * user, and hostile entries (absolute names, "..", hard links, devices) are refused before
 * anything is written. */
#ifndef CELLBOX_SANDBOX_CONFINED_TAR_H
#define CELLBOX_SANDBOX_CONFINED_TAR_H

#include "sandbox/confined.h"

#define CONFINED_TAR_MAX_DEPTH 256 /* deepest nesting archived (one descriptor per level) */

/* Writes a pax (ustar where it fits) archive of the contents of the directory `dir` to out_fd:
   names relative to `dir`, links stored as links, sockets and FIFOs left out; EFBIG once the
   archive would pass max_bytes. 0 or -1. */
int confined_tar_create(confined *c, const char *dir, int out_fd, long long max_bytes);

/* Unpacks the tar (optionally gzip-compressed) read from in_fd beneath `dir` (made if missing):
   regular files, directories and symbolic links only, permissions without setuid, setgid and
   sticky bits. The whole archive is checked first; EINVAL for one that is not a tar or holds an
   entry that is refused, naming it. 0 or -1. */
int confined_tar_extract(confined *c, const char *dir, int in_fd);

#endif
