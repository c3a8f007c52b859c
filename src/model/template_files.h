/* template_files — the files of a template build that the daemon itself touches: a build
 * context's sources (checked, digested for the cache key, copied by COPY/ADD into a layer) and a
 * finished layer's files (sealed before it is committed).
 *
 * The context is the daemon's own extraction of the client's tar, but its names come from the
 * client: a source is resolved beneath the context with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS), so neither ".." nor a symbolic link can take a COPY to a host file, and
 * walks never follow a link (a link is copied as a link). A layer a build step wrote is hostile:
 * sealing bounds its size and removes the sockets and FIFOs a step may leave; then
 * templates_layer_commit makes every file root's, clears setuid/setgid bits and refuses device
 * nodes other than overlayfs's whiteouts (templates.h). */
#ifndef CELLBOX_MODEL_TEMPLATE_FILES_H
#define CELLBOX_MODEL_TEMPLATE_FILES_H

#include <openssl/evp.h>
#include <stdbool.h>
#include <stddef.h>

/* The largest layer one step may leave (its files' blocks). */
#define TEMPLATE_FILES_MAX_LAYER_BYTES (8LL << 30)

/* Whether `source` (relative to the context; a leading '/' is the context's root) names
   something in `context_dir`: no ".." leaving it, no symbolic link on the way. 0, or -1 with
   `why` naming the source. */
int template_files_check_source(const char *context_dir, const char *source, char *why,
                                size_t why_size);
/* Feeds `source`'s names, modes, link targets and contents into `digest`, in a fixed order. */
int template_files_digest(const char *context_dir, const char *source, EVP_MD_CTX *digest,
                          char *why, size_t why_size);
/* COPY/ADD: copies each source into `layer_dir` at the absolute `destination` (a directory when
   `into_directory`, or when a source is a directory: its contents go there). With
   `extract_archives` (ADD), a source that is a tar archive (any compression libarchive reads) is
   unpacked there instead. 0, or -1 with `why`. */
int template_files_copy(const char *context_dir, char *const *sources, int source_count,
                        const char *destination, bool into_directory, bool extract_archives,
                        const char *layer_dir, char *why, size_t why_size);
/* WORKDIR: makes the absolute `directory` (and its parents) in `layer_dir`. 0, or -1 with `why`. */
int template_files_make_directory(const char *layer_dir, const char *directory, char *why,
                                  size_t why_size);
/* Before templates_layer_commit, once the step's sandbox is gone: removes sockets and FIFOs and
   refuses a layer past TEMPLATE_FILES_MAX_LAYER_BYTES. 0, or -1 with `why`. */
int template_files_seal_layer(const char *layer_dir, char *why, size_t why_size);
/* Extracts a build context tar (optionally gzip-compressed) read from `tar_fd` into the empty
   directory `dir`: files, directories and links only, nothing outside it. 0, or -1 with `why`. */
int template_files_extract_context(int tar_fd, const char *dir, char *why, size_t why_size);

#endif
