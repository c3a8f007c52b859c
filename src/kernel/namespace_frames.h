/* namespace_frames — what the daemon accepts of a kernel's answers in a namespace transfer
 * (kernel/namespace_transfer.h): the memfd it names, taken out of its process, and the report
 * it writes. The kernel may be hostile: nothing it says makes the daemon block, follow a link,
 * read past a limit or keep more than it was asked for.
 *
 * Verbs, in the order a transfer uses them: namespace_kernel_process (which process holds the
 * kernel's fds), namespace_take_fd (pidfd_getfd of the fd it names), namespace_check_sealed
 * (a save's container: a sealed memfd within the limit), namespace_check_empty_buffer (a load's
 * buffer: an empty memfd the daemon may write), namespace_report_from_kernel (its report, checked
 * and rebuilt). */
#ifndef CELLBOX_KERNEL_NAMESPACE_FRAMES_H
#define CELLBOX_KERNEL_NAMESPACE_FRAMES_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

/* The host pid of the Python interpreter of the sandbox whose first process is `supervisor`:
   its child that is pid 2 in the sandbox's pid namespace (runtime/zygote.c, sandbox_supervise);
   `supervisor` itself when it is no namespace's pid 1 (a kernel run without a supervisor). 0 if
   there is none. */
pid_t namespace_kernel_process(pid_t supervisor);

/* A pidfd for namespace_kernel_process(supervisor), checked again once open (a pid reused
   between the look-up and the open is not taken for the kernel); -1 with `why`. */
int namespace_open_kernel_process(pid_t supervisor, char *why, size_t why_size);

/* A copy (O_CLOEXEC) of the descriptor `fd_value` (a JSON integer the kernel sent) of the process
   behind `process_pidfd`, with the process's own access to it; -1 with `why`. */
int namespace_take_fd(int process_pidfd, json_t *fd_value, char *why, size_t why_size);

/* A save's container: a memfd sealed against writing, growing and shrinking (what the daemon
   copies cannot change under it; only a memfd can be so sealed), of at most max_bytes; its size
   in *size. -1 with `why`. */
int namespace_check_sealed(int fd, long long max_bytes, long long *size, char *why,
                           size_t why_size);

/* A load's buffer: an empty memfd made with MFD_ALLOW_SEALING and carrying no seal (a file of a
   tmpfs always carries F_SEAL_SEAL, so it cannot pass), open for writing. -1 with `why`. */
int namespace_check_empty_buffer(int fd, char *why, size_t why_size);

/* The kernel's report rebuilt from what it sent: {"carried": [names], "not_carried": [{"name",
   "why"}], "bytes": N} with only strings and integers of bounded length and count (names and
   reasons cut at 200 and 300 bytes, 1000 entries each, "unlisted" counting what was left out).
   NULL with `why` when it is not that shape. A new reference. */
json_t *namespace_report_from_kernel(json_t *report, char *why, size_t why_size);

#endif
