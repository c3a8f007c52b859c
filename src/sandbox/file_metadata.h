/* file_metadata — user-defined metadata on a sandbox's files, kept as E2B's envd keeps it: each
 * key a `user.e2b.<key>` extended attribute of the file, its value the attribute's value. The
 * data lives with the file (a rename inside the sandbox keeps it, `getfattr` shows it)
 * and nothing else records it.
 *
 * The verbs here act on descriptors the caller already opened beneath the sandbox's root with
 * every check (sandbox/confined.c); they never take a path from a client, and they
 * run with whatever filesystem identity the caller holds (the sandbox user's). */
#ifndef CELLBOX_SANDBOX_FILE_METADATA_H
#define CELLBOX_SANDBOX_FILE_METADATA_H

#include <jansson.h>
#include <stddef.h>

#define FILE_METADATA_PREFIX "user.e2b."
/* The kernel's limit on an attribute's whole name (XATTR_NAME_MAX, 255) less the prefix. */
#define FILE_METADATA_MAX_KEY (255 - (int)(sizeof FILE_METADATA_PREFIX - 1))
/* All of a file's metadata, each key counted with its prefix: ext4 keeps a file's attributes in
   one 4 KiB block, so a larger set could not be stored at all. */
#define FILE_METADATA_MAX_TOTAL 4096

/* 0 if `metadata` ({key: string}) can be stored: keys non-empty HTTP tokens (letters, digits and
   !#$%&'*+-.^_`|~) of at most FILE_METADATA_MAX_KEY bytes, values printable ASCII, the whole at
   most FILE_METADATA_MAX_TOTAL bytes; -1 with `why` naming the key and the limit. */
int file_metadata_check(json_t *metadata, char *why, size_t why_size);

/* The metadata of the file open at `fd` (name NULL; an O_PATH descriptor will do), or of the
   entry `name` (one component) of the directory open at `fd`, never following a link there:
   {key: value}, empty when it has none or its file system keeps no attributes. Keys or values
   that are not UTF-8 (set from inside the sandbox with setfattr) or longer than
   FILE_METADATA_MAX_TOTAL are left out. Read through /proc/self/fd, so no path the sandbox
   controls is resolved beyond that one name. */
json_t *file_metadata_read(int fd, const char *name);

/* Replaces the metadata of the file open at `fd` with `metadata` (checked already): keys it does
   not name are removed, so an overwritten file never keeps an earlier upload's. An empty set on a
   file system without attributes is no failure. 0, or -1 with errno. */
int file_metadata_replace(int fd, json_t *metadata);

#endif
