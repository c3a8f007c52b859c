/* huge_code — the code every new kernel runs, moved by the zygote onto 2 MiB pages that all its
 * kernels share.
 *
 * Why: where the host traps on the first touch of each page by a new process (a VM whose
 * hypervisor keeps page tables of its own: ~4.5 µs a page on the dev VM), a kernel's start pays
 * for every 4 KiB page of code it runs, ~1200 of them in libpython and numpy's core module alone.
 * A page mapped by one 2 MiB entry costs that once (measured there: ~0.03 µs per 4 KiB read).
 * Linux maps a library's file with 4 KiB pages (file-backed huge text needs
 * CONFIG_READ_ONLY_THP_FOR_FS, which the dev VM's kernel lacks), so the zygote makes the huge
 * pages itself: it copies each 2 MiB-aligned window of a library's read-only segments into an
 * anonymous huge page and moves the copy over the file's pages with mremap. The addresses do not
 * change, so nothing that points into the code notices; a fork shares the huge page.
 *
 * Where the copy lives. First choice: a page of the host's hugetlb pool (vm.nr_hugepages, which
 * an administrator reserves), in a memfd sealed against writes once filled and mapped shared by
 * the zygote and every kernel. Otherwise: a transparent huge page, private (copy-on-write). The
 * difference shows on the dev VM: with transparent huge pages each kernel's next cell after a
 * pause of a second or more took ~1–3 ms longer, with hugetlb pages it did not (A/B, measured).
 * The likely cause, not proven: that VM's kernel samples pages for reclaim (DAMON, every 0.5 s),
 * and sampling a transparent huge page clears its accessed bit in every process that maps it,
 * which the hypervisor must then take back page by page; hugetlb pages are never on the reclaim
 * lists, so the sampling skips them. Pool-empty starts were ~1.5 ms faster with either.
 *
 * Off by default (the daemon's --huge-code-pages): it takes pages of a host-wide pool, and
 * without that pool it slows the cells after a pause on hosts like the dev VM.
 *
 * Which windows: those whose pages the probe (the kernel the zygote starts to learn its hot
 * pages, see hot_pages.h) mapped itself. Only our own code ran in the probe, so no user shapes
 * the set. Each window costs the zygote 2 MiB once, not each kernel.
 *
 * What changes for the code: a window that holds any executable segment is mapped read+exec as
 * a whole, so read-only data beside code in the same window becomes executable too. Inside a
 * sandbox that gives nothing: its code runs any instruction it likes already, and the isolation
 * is the kernel's namespaces, seccomp and Landlock, not the process's page protections. A kernel
 * that tries to make the code writable: on a pool page, mprotect fails (EACCES: the memfd is
 * sealed), so no kernel can write what the others run, nor take more of the pool; on a
 * transparent huge page, it gets its own 4 KiB copy (the huge page is split for it), as with the
 * file's pages. Tools that name code by its file (perf, gdb) see a memfd or anonymous memory
 * there. */
#ifndef CELLBOX_RUNTIME_HUGE_CODE_H
#define CELLBOX_RUNTIME_HUGE_CODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define HUGE_CODE_PAGE_SIZE (2u << 20)
/* A window is worth its 2 MiB once the probe mapped this many of its 512 pages (a file fault
   maps up to 16 at once, so this is at least four separate places in it). */
#define HUGE_CODE_MIN_PAGES 64
/* At most this many windows (64 MiB) are moved. */
#define HUGE_CODE_MAX_WINDOWS 32

typedef struct huge_window {
    uintptr_t start;      /* 2 MiB-aligned */
    int protection;       /* PROT_READ, or PROT_READ | PROT_EXEC */
    unsigned probe_pages; /* of its pages the probe had mapped */
} huge_window;

typedef struct huge_code {
    huge_window windows[HUGE_CODE_MAX_WINDOWS];
    size_t count;
} huge_code;

/* The 2 MiB-aligned windows of the loaded libraries' read-only segments in which `probe`, a fork
   of this process, mapped at least `min_pages` pages, the most mapped first. The libraries
   holding this module's code and the C library it calls are never chosen: their pages cannot
   be moved while they run. 0, or -1 with errno (the set is then empty). */
int huge_code_learn(pid_t probe, unsigned min_pages, huge_code *out);

/* Moves each window of `code` onto a huge page of its own: one of the hugetlb pool if
   `pool_first` and one is free (counted in *from_pool), else a transparent one. A window that
   cannot be moved (no huge page to be had, or a kernel before 6.1 without MADV_COLLAPSE) keeps
   the file's pages. Returns the windows moved; `why` says why the first that was not (empty if
   all were). */
size_t huge_code_move(const huge_code *code, bool pool_first, size_t *from_pool, char *why,
                      size_t why_size);

#endif
