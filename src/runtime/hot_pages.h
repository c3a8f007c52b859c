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
 * Only our own code has run in the probe, so no user can shape the set. */
#ifndef CELLBOX_RUNTIME_HOT_PAGES_H
#define CELLBOX_RUNTIME_HOT_PAGES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* At most this many pages (32 MiB) are copied ahead: a bound on what a kernel is given. */
#define HOT_PAGES_MAX 8192

typedef struct hot_range {
    uintptr_t start;
    size_t length; /* bytes, a multiple of the page size */
} hot_range;

typedef struct hot_pages {
    hot_range *ranges;
    size_t count;
    size_t pages; /* in all the ranges */
} hot_pages;

/* In the zygote, with `probe` a fork of it that has started a kernel: the private writable pages
   of the zygote's own mappings that the probe holds a copy of. 0, or -1 with errno (the set is
   then empty; EOPNOTSUPP: this kernel cannot copy pages ahead). */
int hot_pages_learn(pid_t probe, hot_pages *out);

/* In a new kernel, right after its fork: copies every page of the set. Failing is harmless (the
   pages are then copied as they are written); returns the pages copied. */
size_t hot_pages_copy(const hot_pages *pages);

void hot_pages_free(hot_pages *pages);

#endif
