#include "runtime/hot_pages.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older headers lack it */
#endif

/* /proc/PID/pagemap: one 64-bit entry per page (Documentation/admin-guide/mm/pagemap.rst). */
#define PAGEMAP_PRESENT (1ull << 63)
#define PAGEMAP_EXCLUSIVE (1ull << 56)
#define PAGEMAP_CHUNK 4096 /* entries read at a time */
/* A private writable mapping this large is a sparse reservation (a sanitizer's shadow, a
   reserved heap), not what an interpreter's start writes to. */
#define SPARSE_MAPPING (1ul << 30)

static int add_page(hot_pages *out, uintptr_t address, size_t page_size)
{
    hot_range *last = out->count ? &out->ranges[out->count - 1] : NULL;
    if (last && last->start + last->length == address) {
        last->length += page_size;
    } else {
        if (out->count == out->capacity) {
            size_t grown = out->capacity ? out->capacity * 2 : 256;
            hot_range *ranges = realloc(out->ranges, grown * sizeof *ranges);
            if (!ranges)
                return -1;
            out->ranges = ranges;
            out->capacity = grown;
        }
        out->ranges[out->count++] = (hot_range){.start = address, .length = page_size};
    }
    out->pages++;
    return 0;
}

/* The probe's copies within one of the zygote's mappings [start, end). */
static int learn_mapping(int pagemap, uintptr_t start, uintptr_t end, size_t page_size,
                         hot_pages *out)
{
    uint64_t entries[PAGEMAP_CHUNK];
    for (uintptr_t address = start; address < end && out->pages < HOT_PAGES_MAX;) {
        size_t wanted = (end - address) / page_size;
        if (wanted > PAGEMAP_CHUNK)
            wanted = PAGEMAP_CHUNK;
        off_t offset = (off_t)(address / page_size * sizeof entries[0]);
        ssize_t got = pread(pagemap, entries, wanted * sizeof entries[0], offset);
        if (got <= 0)
            return got < 0 ? -1 : 0;
        size_t count = (size_t)got / sizeof entries[0];
        for (size_t i = 0; i < count && out->pages < HOT_PAGES_MAX; i++) {
            uint64_t bits = PAGEMAP_PRESENT | PAGEMAP_EXCLUSIVE;
            if ((entries[i] & bits) == bits &&
                add_page(out, address + i * page_size, page_size) < 0)
                return -1;
        }
        address += count * page_size;
    }
    return 0;
}

int hot_pages_learn(pid_t probe, hot_pages *out)
{
    memset(out, 0, sizeof *out);
    size_t page_size = (size_t)sysconf(_SC_PAGESIZE);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/pagemap", (int)probe);
    int pagemap = open(path, O_RDONLY | O_CLOEXEC);
    FILE *maps = fopen("/proc/self/maps", "re");
    if (pagemap < 0 || !maps) {
        int saved = errno;
        if (pagemap >= 0)
            close(pagemap);
        if (maps)
            fclose(maps);
        errno = saved;
        return -1;
    }
    int rc = 0;
    char line[4096];
    while (rc == 0 && fgets(line, sizeof line, maps)) {
        unsigned long start, end;
        char permissions[8];
        int name_at = 0;
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &start, &end, permissions, &name_at) < 3)
            continue;
        /* Private and writable: where copy-on-write happens. Not the main thread's stack: a
           kernel runs on the stack of its sandbox's first process (sandbox.c). */
        if (strcmp(permissions, "rw-p") != 0 || strncmp(line + name_at, "[stack]", 7) == 0)
            continue;
        if (end - start > SPARSE_MAPPING) /* reserved, not used: its pagemap is too long to read */
            continue;
        rc = learn_mapping(pagemap, start, end, page_size, out);
    }
    int saved = errno;
    fclose(maps);
    close(pagemap);
    /* A kernel before 5.14 has no MADV_POPULATE_WRITE, and without it the set is useless:
       tried once here, on one of our own pages (copying that page is harmless). */
    if (rc == 0 && out->count > 0 &&
        madvise((void *)out->ranges[0].start, page_size, MADV_POPULATE_WRITE) < 0 && errno == EINVAL) {
        rc = -1;
        saved = EOPNOTSUPP;
    }
    if (rc < 0) {
        hot_pages_free(out);
        errno = saved;
    }
    return rc;
}

int hot_pages_add_stack_top(hot_pages *set, uintptr_t address, size_t below)
{
    size_t page_size = (size_t)sysconf(_SC_PAGESIZE);
    FILE *maps = fopen("/proc/self/maps", "re");
    if (!maps)
        return -1;
    unsigned long start = 0, end = 0;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, maps))
        found = sscanf(line, "%lx-%lx", &start, &end) == 2 && start <= address && address < end;
    fclose(maps);
    if (!found) {
        errno = ENOENT;
        return -1;
    }
    /* Not below the mapping's start: a stack that has not grown there yet would have to grow
       for the pin, and pinning does not grow stacks. */
    uintptr_t from = (address & ~(uintptr_t)(page_size - 1));
    from = from - start > below ? from - below : start;
    for (uintptr_t page = from; page < end; page += page_size)
        if (add_page(set, page, page_size) < 0)
            return -1;
    return 0;
}

static bool holds(const hot_pages *set, uintptr_t page)
{
    for (size_t i = 0; i < set->count; i++)
        if (set->ranges[i].start <= page && page - set->ranges[i].start < set->ranges[i].length)
            return true;
    return false;
}

/* Adds to `set` (unless it holds them) the present pages of this process's private writable
   mappings, but the main stack and sparse ones, that are exclusively its own. */
static int add_exclusive(FILE *maps, int pagemap, hot_pages *set)
{
    size_t page_size = (size_t)sysconf(_SC_PAGESIZE);
    char line[4096];
    uint64_t entries[64];
    const uint64_t bits = PAGEMAP_PRESENT | PAGEMAP_EXCLUSIVE;
    rewind(maps);
    while (fgets(line, sizeof line, maps)) {
        unsigned long start, end;
        char permissions[8];
        int name_at = 0;
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &start, &end, permissions, &name_at) < 3 ||
            strcmp(permissions, "rw-p") != 0 || strncmp(line + name_at, "[stack]", 7) == 0 ||
            end - start > SPARSE_MAPPING)
            continue;
        for (uintptr_t address = start; address < end;) {
            size_t wanted = (end - address) / page_size;
            if (wanted > sizeof entries / sizeof entries[0])
                wanted = sizeof entries / sizeof entries[0];
            ssize_t got = pread(pagemap, entries, wanted * sizeof entries[0],
                                (off_t)(address / page_size * sizeof entries[0]));
            if (got <= 0) {
                if (got < 0)
                    return -1;
                break;
            }
            for (size_t i = 0; i < (size_t)got / sizeof entries[0]; i++) {
                uintptr_t page = address + i * page_size;
                if ((entries[i] & bits) == bits && !holds(set, page) &&
                    add_page(set, page, page_size) < 0) {
                    errno = ENOMEM;
                    return -1;
                }
            }
            address += (size_t)got / sizeof entries[0] * page_size;
        }
    }
    return 0;
}

int hot_pages_add_written_by_fork(hot_pages *set)
{
    int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    /* Opened, and its buffer allocated (the first read), before the rehearsal: what this
       function itself writes stays out of what is learned, but for its stack and errno. */
    FILE *maps = fopen("/proc/self/maps", "re");
    int held[2] = {-1, -1};
    pid_t holder = -1;
    int rc = pagemap >= 0 && maps && fgetc(maps) != EOF && pipe2(held, O_CLOEXEC) == 0 ? 0 : -1;
    if (rc == 0) {
        /* A child that shares every page until the end: a page written from here on (by this
           fork's own parent handlers too) is copied, and the copy is this process's alone. */
        holder = fork();
        if (holder == 0) {
            close(held[1]);
            char byte;
            while (read(held[0], &byte, 1) < 0 && errno == EINTR) {
            }
            _exit(0);
        }
        rc = holder < 0 ? -1 : 0;
    }
    if (rc == 0) {
        pid_t rehearsal = fork(); /* the prepare and parent handlers run here, in this process */
        if (rehearsal == 0)
            _exit(0);
        if (rehearsal < 0)
            rc = -1;
        else
            while (waitpid(rehearsal, NULL, 0) < 0 && errno == EINTR) {
            }
    }
    if (rc == 0)
        rc = add_exclusive(maps, pagemap, set); /* and a few the holder wrote: harmless */
    int saved = errno;
    if (held[1] >= 0)
        close(held[1]); /* the holder's end of file */
    if (holder > 0)
        while (waitpid(holder, NULL, 0) < 0 && errno == EINTR) {
        }
    if (held[0] >= 0)
        close(held[0]);
    if (maps)
        fclose(maps);
    if (pagemap >= 0)
        close(pagemap);
    errno = saved;
    return rc;
}

size_t hot_pages_copy(const hot_pages *pages)
{
    size_t copied = 0;
    for (size_t i = 0; i < pages->count; i++) {
        const hot_range *range = &pages->ranges[i];
        if (madvise((void *)range->start, range->length, MADV_POPULATE_WRITE) == 0)
            copied += range->length;
        /* else the pages are copied as they are written: the set is only a head start */
    }
    return copied / (size_t)sysconf(_SC_PAGESIZE);
}

void hot_pages_free(hot_pages *pages)
{
    free(pages->ranges);
    memset(pages, 0, sizeof *pages);
}

int hot_pages_pin(const hot_pages *pages)
{
    if (pages->count == 0 || pages->count > IORING_MAX_PINNED_RANGES) {
        errno = E2BIG;
        return -1;
    }
    struct io_uring_params params;
    memset(&params, 0, sizeof params);
    int ring = (int)syscall(SYS_io_uring_setup, 1, &params); /* close-on-exec from the start */
    if (ring < 0)
        return -1;
    struct iovec *buffers = calloc(pages->count, sizeof *buffers);
    if (!buffers) {
        close(ring);
        errno = ENOMEM;
        return -1;
    }
    for (size_t i = 0; i < pages->count; i++)
        buffers[i] = (struct iovec){.iov_base = (void *)pages->ranges[i].start,
                                    .iov_len = pages->ranges[i].length};
    long rc = syscall(SYS_io_uring_register, ring, IORING_REGISTER_BUFFERS, buffers,
                      (unsigned)pages->count);
    int saved = errno;
    free(buffers);
    if (rc < 0) {
        close(ring);
        errno = saved;
        return -1;
    }
    return ring;
}
