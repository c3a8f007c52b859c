#include "runtime/huge_code.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1; older headers lack it */
#endif

#define PAGEMAP_PRESENT (1ull << 63)
#define PAGES_PER_WINDOW (HUGE_CODE_PAGE_SIZE / 4096u)

typedef struct learning {
    int pagemap; /* the probe's /proc/PID/pagemap */
    unsigned min_pages;
    uintptr_t keep[3]; /* addresses whose library stays as it is: the code that moves windows */
    huge_code *out;
} learning;

static bool object_holds(const struct dl_phdr_info *object, uintptr_t address)
{
    for (int i = 0; i < object->dlpi_phnum; i++) {
        const ElfW(Phdr) *segment = &object->dlpi_phdr[i];
        uintptr_t start = object->dlpi_addr + segment->p_vaddr;
        if (segment->p_type == PT_LOAD && address >= start && address - start < segment->p_memsz)
            return true;
    }
    return false;
}

/* The pages the loader made read-only after relocating them (PT_GNU_RELRO: the GOT, vtables),
   as glibc protects them: from the page holding the start to the page holding the end. */
static void relro_pages(const struct dl_phdr_info *object, uintptr_t *from, uintptr_t *to)
{
    *from = *to = 0;
    for (int i = 0; i < object->dlpi_phnum; i++) {
        const ElfW(Phdr) *segment = &object->dlpi_phdr[i];
        if (segment->p_type == PT_GNU_RELRO) {
            *from = (object->dlpi_addr + segment->p_vaddr) & ~(uintptr_t)4095;
            *to = (object->dlpi_addr + segment->p_vaddr + segment->p_memsz) & ~(uintptr_t)4095;
        }
    }
}

/* What protection [start, start + 2 MiB) may be given: 0 unless the object's segments cover
   all of it with pages that are read-only for good: its read-only segments, and of its writable
   one only the part the loader made read-only (a window may end there: libpython's last
   read-only data shares one with the start of its GOT). */
static int window_protection(const struct dl_phdr_info *object, uintptr_t start)
{
    const uintptr_t page = 4096, end = start + HUGE_CODE_PAGE_SIZE;
    int protection = PROT_READ;
    uintptr_t covered = start; /* the window is covered up to here (segments come in order) */
    uintptr_t relro_from, relro_to;
    relro_pages(object, &relro_from, &relro_to);
    for (int i = 0; i < object->dlpi_phnum; i++) {
        const ElfW(Phdr) *segment = &object->dlpi_phdr[i];
        if (segment->p_type != PT_LOAD)
            continue;
        uintptr_t from = (object->dlpi_addr + segment->p_vaddr) & ~(page - 1);
        uintptr_t to =
            (object->dlpi_addr + segment->p_vaddr + segment->p_memsz + page - 1) & ~(page - 1);
        if (to <= start || from >= end)
            continue;
        if (segment->p_flags & PF_W) {
            /* Data a kernel writes must stay 4 KiB pages of its own; relocated data that is
               read-only from now on need not. */
            uintptr_t inside_from = from > start ? from : start, inside_to = to < end ? to : end;
            if (inside_from < relro_from || inside_to > relro_to)
                return 0;
        }
        if (from > covered)
            return 0; /* a hole between segments: not the library's to fill */
        if (to > covered)
            covered = to;
        if (segment->p_flags & PF_X)
            protection |= PROT_EXEC;
    }
    return covered >= end ? protection : 0;
}

static unsigned probe_pages(int pagemap, uintptr_t start)
{
    uint64_t entries[PAGES_PER_WINDOW];
    off_t offset = (off_t)(start / 4096 * sizeof entries[0]);
    if (pread(pagemap, entries, sizeof entries, offset) != (ssize_t)sizeof entries)
        return 0;
    unsigned mapped = 0;
    for (size_t i = 0; i < PAGES_PER_WINDOW; i++)
        mapped += (entries[i] & PAGEMAP_PRESENT) != 0;
    return mapped;
}

static void add_window(huge_code *out, huge_window window)
{
    size_t at = out->count;
    if (at == HUGE_CODE_MAX_WINDOWS) { /* full: replace the least used if this one is used more */
        at = HUGE_CODE_MAX_WINDOWS - 1;
        if (out->windows[at].probe_pages >= window.probe_pages)
            return;
    } else {
        out->count++;
    }
    while (at > 0 && out->windows[at - 1].probe_pages < window.probe_pages) {
        out->windows[at] = out->windows[at - 1];
        at--;
    }
    out->windows[at] = window;
}

static int learn_object(struct dl_phdr_info *object, size_t size, void *data)
{
    (void)size;
    learning *state = data;
    for (size_t i = 0; i < sizeof state->keep / sizeof state->keep[0]; i++)
        if (object_holds(object, state->keep[i]))
            return 0;
    uintptr_t lowest = UINTPTR_MAX, highest = 0;
    for (int i = 0; i < object->dlpi_phnum; i++) {
        const ElfW(Phdr) *segment = &object->dlpi_phdr[i];
        if (segment->p_type != PT_LOAD)
            continue;
        uintptr_t start = object->dlpi_addr + segment->p_vaddr;
        if (start < lowest)
            lowest = start;
        if (start + segment->p_memsz > highest)
            highest = start + segment->p_memsz;
    }
    for (uintptr_t window =
             (lowest + HUGE_CODE_PAGE_SIZE - 1) & ~(uintptr_t)(HUGE_CODE_PAGE_SIZE - 1);
         lowest < highest && window + HUGE_CODE_PAGE_SIZE <= highest;
         window += HUGE_CODE_PAGE_SIZE) {
        int protection = window_protection(object, window);
        if (!protection)
            continue;
        unsigned mapped = probe_pages(state->pagemap, window);
        if (mapped >= state->min_pages)
            add_window(
                state->out,
                (huge_window){.start = window, .protection = protection, .probe_pages = mapped});
    }
    return 0;
}

int huge_code_learn(pid_t probe, unsigned min_pages, huge_code *out)
{
    memset(out, 0, sizeof *out);
    if (sysconf(_SC_PAGESIZE) != 4096) { /* the window arithmetic assumes x86-64's pages */
        errno = EOPNOTSUPP;
        return -1;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/pagemap", (int)probe);
    learning state = {.pagemap = open(path, O_RDONLY | O_CLOEXEC),
                      .min_pages = min_pages,
                      .keep = {(uintptr_t)huge_code_move, (uintptr_t)mremap, (uintptr_t)memcpy},
                      .out = out};
    if (state.pagemap < 0)
        return -1;
    dl_iterate_phdr(learn_object, &state);
    close(state.pagemap);
    return 0;
}

/* A fresh anonymous 2 MiB-aligned region on a huge page, or NULL. */
static void *huge_region(char *why, size_t why_size)
{
    size_t size = HUGE_CODE_PAGE_SIZE;
    unsigned char *area =
        mmap(NULL, 2 * size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED) {
        snprintf(why, why_size, "mmap: %s", strerror(errno));
        return NULL;
    }
    unsigned char *aligned =
        (unsigned char *)(((uintptr_t)area + size - 1) & ~(uintptr_t)(size - 1));
    if (aligned > area)
        munmap(area, (size_t)(aligned - area));
    munmap(aligned + size, (size_t)(area + 2 * size - (aligned + size)));
    /* The hint makes the first write take a huge page where the host's policy is "madvise";
       the collapse below makes one where it is not (or none was free then). */
    madvise(aligned, size, MADV_HUGEPAGE);
    aligned[0] = 0;
    if (madvise(aligned, size, MADV_COLLAPSE) < 0) {
        snprintf(why, why_size, "no huge page (MADV_COLLAPSE: %s)", strerror(errno));
        munmap(aligned, size);
        return NULL;
    }
    return aligned;
}

/* A copy of `window` on a page of the host's hugetlb pool, in a memfd sealed against writes
   and mapped shared with the window's protection (not yet at its address); NULL, with `why`,
   when the pool has no page free (or this Linux cannot). */
static void *pool_copy(const huge_window *window, char *why, size_t why_size)
{
    size_t size = HUGE_CODE_PAGE_SIZE;
    int fd = memfd_create("cellbox-huge-code", MFD_CLOEXEC | MFD_HUGETLB | MFD_ALLOW_SEALING);
    if (fd < 0) {
        snprintf(why, why_size, "no hugetlb memfd: %s", strerror(errno));
        return NULL;
    }
    void *copy = NULL;
    void *filling = MAP_FAILED;
    if (ftruncate(fd, (off_t)size) < 0) {
        snprintf(why, why_size, "no hugetlb page: %s", strerror(errno));
    } else if ((filling = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                               0)) == MAP_FAILED) {
        snprintf(why, why_size, "no hugetlb page: %s", strerror(errno));
    } else {
        memcpy(filling, (const void *)window->start, size);
        munmap(filling, size);
        /* Sealed once filled: no process can map the page writable again, so a kernel's
           mprotect(PROT_WRITE) of its code fails (EACCES) where it would write every kernel's. */
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
            snprintf(why, why_size, "cannot seal the hugetlb copy: %s", strerror(errno));
        } else {
            copy = mmap(NULL, size, window->protection, MAP_SHARED, fd, 0);
            if (copy == MAP_FAILED) {
                snprintf(why, why_size, "cannot map the hugetlb copy: %s", strerror(errno));
                copy = NULL;
            }
        }
    }
    close(fd); /* the mapping keeps the page */
    return copy;
}

/* A private copy of `window` on a transparent huge page, protected as the window (not yet at its
   address); NULL, with `why`. */
static void *transparent_copy(const huge_window *window, char *why, size_t why_size)
{
    void *copy = huge_region(why, why_size);
    if (!copy)
        return NULL;
    memcpy(copy, (const void *)window->start, HUGE_CODE_PAGE_SIZE);
    /* Protected before the move: the window is never writable at its own address. */
    if (mprotect(copy, HUGE_CODE_PAGE_SIZE, window->protection) < 0) {
        snprintf(why, why_size, "mprotect: %s", strerror(errno));
        munmap(copy, HUGE_CODE_PAGE_SIZE);
        return NULL;
    }
    return copy;
}

/* Moves `copy` over the window: the file's pages are replaced in one step (no moment without
   code there). */
static bool move_over(void *copy, const huge_window *window, char *why, size_t why_size)
{
    if (mremap(copy, HUGE_CODE_PAGE_SIZE, HUGE_CODE_PAGE_SIZE, MREMAP_MAYMOVE | MREMAP_FIXED,
               (void *)window->start) != MAP_FAILED)
        return true;
    snprintf(why, why_size, "cannot move it: %s", strerror(errno));
    munmap(copy, HUGE_CODE_PAGE_SIZE);
    return false;
}

size_t huge_code_move(const huge_code *code, bool pool_first, size_t *from_pool, char *why,
                      size_t why_size)
{
    size_t moved = 0;
    *from_pool = 0;
    why[0] = '\0';
    for (size_t i = 0; i < code->count; i++) {
        const huge_window *window = &code->windows[i];
        char failure[160] = "";
        if (pool_first) {
            void *copy = pool_copy(window, failure, sizeof failure);
            if (copy && move_over(copy, window, failure, sizeof failure)) {
                moved++;
                (*from_pool)++;
                continue;
            }
        }
        void *copy = transparent_copy(window, failure, sizeof failure);
        if (copy && move_over(copy, window, failure, sizeof failure)) {
            moved++;
            continue;
        }
        if (!why[0])
            snprintf(why, why_size, "window at %#lx: %s", (unsigned long)window->start, failure);
    }
    return moved;
}
