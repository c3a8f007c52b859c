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
 * Off by default (the daemon's --huge-code-pages): on the dev VM it made pool-empty starts ~3 ms
 * faster but every cell after a second of idle ~3 ms slower (no more page faults: the
 * hypervisor's mappings of huge pages cost more to get back there after a pause).
 *
 * Which windows: those whose pages the probe (the kernel the zygote starts to learn its hot
 * pages, see hot_pages.h) mapped itself. Only our own code ran in the probe, so no user shapes
 * the set. Each window costs the zygote 2 MiB once, not each kernel.
 *
 * What changes for the code: a window that holds any executable segment is mapped read+exec as
 * a whole, so read-only data beside code in the same window becomes executable too. Inside a
 * sandbox that gives nothing: its code runs any instruction it likes already, and the isolation
 * is the kernel's namespaces, seccomp and Landlock, not the process's page protections. The copy
 * is private: a kernel that makes it writable and writes gets its own 4 KiB copy (the huge page
 * is split for it), as with the file's pages. Tools that name code by its file (perf, gdb) see
 * anonymous memory there. */
#ifndef CELLBOX_RUNTIME_HUGE_CODE_H
#define CELLBOX_RUNTIME_HUGE_CODE_H

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

/* Moves each window of `code` onto a huge page of its own. A window that cannot be (no huge page
   to be had, or a kernel before 6.1 without MADV_COLLAPSE) keeps the file's pages. Returns the
   windows moved; `why` says why the first that was not (empty if all were). */
size_t huge_code_move(const huge_code *code, char *why, size_t why_size);

#endif
