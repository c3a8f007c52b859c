/* hot_pages — the zygote's pages that every new kernel writes, copied in bulk right after the
 * kernel's fork instead of one copy-on-write fault at a time.
 *
 * Why: a kernel's start and first cell write ~1800 pages it shares with the zygote (CPython's reference
 * counts are writes), and always the same ones. Each copy-on-write fault is a trap; in a VM that
 * costs ~16 µs a page (measured on the 2-core dev VM), most of a new kernel's CPU.
 * MADV_POPULATE_WRITE (Linux 5.14) breaks the sharing of a whole range in one system call.
 *
 * The zygote learns the set once, before it serves: it forks a probe that starts a kernel as
 * a real one does (outside any sandbox, on a scratch directory) and runs a trivial first cell,
 * and reads which of its own private writable pages the probe has copied, from
 * /proc/PID/pagemap ("exclusively mapped").
 * Only our own code has run in the probe, so no user can shape the set.
 *
 * Then it pins them (hot_pages_pin). A fork copies a pinned page into the child on the spot
 * (Linux must: the pin may be a device's DMA target), which costs a page allocation and a copy,
 * where breaking the sharing afterwards, even in bulk, also costs a TLB flush per page (on the
 * dev VM a trap into the hypervisor). For 1600 scattered pages there, measured with a small C
 * program: the fork takes ~2 ms longer and the child's bulk copy (~10.5 ms) is gone; fork, copy
 * and the child's first writes 20 instead of 29 ms. Without the pin (no io_uring), each kernel
 * copies the set itself (hot_pages_copy). */
#ifndef CELLBOX_RUNTIME_HOT_PAGES_H
#define CELLBOX_RUNTIME_HOT_PAGES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* At most this many pages (32 MiB) are copied ahead: a bound on what a kernel is given. */
#define HOT_PAGES_MAX 8192
/* io_uring registers at most this many buffers (IORING_MAX_REG_BUFFERS). */
#define IORING_MAX_PINNED_RANGES 16384

typedef struct hot_range {
    uintptr_t start;
    size_t length; /* bytes, a multiple of the page size */
} hot_range;

typedef struct hot_pages {
    hot_range *ranges;
    size_t count;
    size_t capacity; /* ranges allocated */
    size_t pages;    /* in all the ranges */
} hot_pages;

/* In the zygote, with `probe` a fork of it that has started a kernel: the private writable pages
   of the zygote's own mappings that the probe holds a copy of. 0, or -1 with errno (the set is
   then empty; EOPNOTSUPP: this kernel cannot copy pages ahead). */
int hot_pages_learn(pid_t probe, hot_pages *out);

/* Adds the top of a stack to the set: the pages of the mapping that holds `address`, from
   `below` bytes under it to the mapping's end. 0, or -1 with errno (ENOENT: no such mapping). */
int hot_pages_add_stack_top(hot_pages *set, uintptr_t address, size_t below);

/* Adds the pages of private writable mappings (not the main stack: see hot_pages_add_stack_top)
   that a fork() writes in the forking process. What a fork runs in the parent is not only ours:
   libraries' pthread_atfork handlers (OpenBLAS's locks a mutex in its .bss before it looks
   whether it has threads to stop). In the zygote's clones pid 1 forks the kernel in the zygote's
   memory while the zygote stands in the sandbox's memory cgroup, so the pages those write must
   be pinned too (see add_stack_tops in zygote.c). Learned by a rehearsal: with a child holding
   every page shared, the pages a fork (whose child exits at once) leaves exclusively this
   process's. Pages already in the set are not added twice. 0, or -1 with errno. */
int hot_pages_add_written_by_fork(hot_pages *set);

/* In a new kernel, right after its fork, when the set is not pinned: copies every page of the
   set. Failing is harmless (the pages are then copied as they are written); returns the pages
   copied. */
size_t hot_pages_copy(const hot_pages *pages);

/* In the zygote, once the set is learned: pins its pages, as the registered buffers of an
   io_uring that is never used for I/O and stays open for the zygote's life (closing it unpins).
   Returns the ring's descriptor (close-on-exec), or -1 with errno (ENOSYS or EPERM where io_uring
   is disabled, E2BIG for an empty or oversized set): kernels then copy the set themselves.
   The copies are charged to the memory cgroup of the process that owns the forked memory; see
   enter_memory_cgroup in zygote.c. */
int hot_pages_pin(const hot_pages *pages);

void hot_pages_free(hot_pages *pages);

#endif
