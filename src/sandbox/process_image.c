/* process_image — see process_image.h; the format is docs/checkpoint-format.md.
 *
 * The file: "CBXIMG01", the JSON description's length (8 bytes, little-endian), the JSON, zeros
 * to the next page, then the pages of every run at the offsets the JSON gives (relative to that
 * page-aligned start), so that each run can be mapped straight from the file. Pages left out
 * are holes: a sparse file, or nothing at all in a memfd. */
#include "sandbox/process_image.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <unistd.h>

#define IMAGE_MAGIC "CBXIMG01"
#define HEADER_PREFIX 16              /* magic + JSON length */
#define MAX_DESCRIPTION (64u << 20)   /* a description past this is not one of ours */
#define MAX_MAPPINGS 65536
#define PAGEMAP_PRESENT (1ull << 63)
#define PAGEMAP_SWAPPED (1ull << 62)
#define PAGEMAP_FILE (1ull << 61) /* the page is the file's (or shared), not a private copy */
#define PAGEMAP_PFN_MASK ((1ull << 55) - 1)
#define COPY_CHUNK (4u << 20)         /* bytes read from the process per process_vm_readv */
#define PAGEMAP_CHUNK 4096u           /* pagemap entries read at once */

struct process_image {
    char generation[128];
    bool full;
    unsigned long long brk;
    unsigned long long data_start; /* where page data begins: the runs' offsets are from here */
    size_t count;
    process_image_mapping *mappings;
};

static long page_size(void) { return sysconf(_SC_PAGESIZE); }

static void set_why(char *why, size_t why_size, const char *format, const char *detail)
{
    snprintf(why, why_size, format, detail);
}

size_t process_image_mapping_count(const process_image *image) { return image->count; }
const process_image_mapping *process_image_mapping_at(const process_image *image, size_t index)
{
    return index < image->count ? &image->mappings[index] : NULL;
}
unsigned long long process_image_brk(const process_image *image) { return image->brk; }
const char *process_image_generation(const process_image *image) { return image->generation; }
bool process_image_is_full(const process_image *image) { return image->full; }

void process_image_free(process_image *image)
{
    if (!image)
        return;
    for (size_t i = 0; i < image->count; i++)
        free(image->mappings[i].runs);
    free(image->mappings);
    free(image);
}

/* ---- /proc/PID/maps ---- */

static bool is_special(const char *path)
{
    return strcmp(path, "[vdso]") == 0 || strcmp(path, "[vvar]") == 0 ||
           strcmp(path, "[vvar_vclock]") == 0 || strcmp(path, "[vsyscall]") == 0;
}

/* One line of maps into `m` (without runs); false for a line that is not one. */
static bool parse_maps_line(const char *line, process_image_mapping *m)
{
    char perms[8] = "", path[sizeof m->path] = "";
    int consumed = 0;
    memset(m, 0, sizeof *m);
    if (sscanf(line, "%llx-%llx %7s %llx %15s %llu %n", &m->start, &m->end, perms, &m->offset,
               m->dev, &m->inode, &consumed) < 6)
        return false;
    snprintf(path, sizeof path, "%s", line + consumed);
    path[strcspn(path, "\n")] = '\0';
    snprintf(m->path, sizeof m->path, "%s", path);
    m->prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
              (perms[2] == 'x' ? PROT_EXEC : 0);
    m->shared = perms[3] == 's';
    bool file_backed = m->inode != 0 && m->path[0] == '/';
    if (is_special(m->path))
        m->kind = PROCESS_IMAGE_SPECIAL;
    else if (strcmp(m->path, "[stack]") == 0)
        m->kind = PROCESS_IMAGE_STACK;
    else if (file_backed && !(m->prot & PROT_WRITE) && !strstr(m->path, " (deleted)"))
        m->kind = PROCESS_IMAGE_FILE; /* code, read-only data, a read-only shared file */
    else
        m->kind = PROCESS_IMAGE_DATA;
    return true;
}

/* Every mapping of maps_path; NULL with `why`. */
static process_image_mapping *read_maps(const char *maps_path, size_t *count, char *why,
                                        size_t why_size)
{
    FILE *maps = fopen(maps_path, "re");
    if (!maps) {
        snprintf(why, why_size, "cannot read %s: %s", maps_path, strerror(errno));
        return NULL;
    }
    size_t capacity = 256;
    process_image_mapping *list = malloc(capacity * sizeof *list);
    char line[512];
    *count = 0;
    while (list && fgets(line, sizeof line, maps) && *count < MAX_MAPPINGS) {
        if (*count == capacity) {
            process_image_mapping *bigger = realloc(list, 2 * capacity * sizeof *list);
            if (!bigger)
                break;
            list = bigger, capacity *= 2;
        }
        if (parse_maps_line(line, &list[*count]))
            (*count)++;
    }
    fclose(maps);
    if (!list)
        snprintf(why, why_size, "out of memory reading %s", maps_path);
    return list;
}

process_image_mapping *process_image_maps(const char *maps_path, size_t *count, char *why,
                                          size_t why_size)
{
    return read_maps(maps_path, count, why, why_size);
}

/* ---- capture ---- */

typedef struct capture {
    pid_t pid;
    int pagemap, base_pagemap;    /* base_pagemap -1: a full image */
    char binary[256];             /* cellbox-kernel's path in the maps: its .data/.bss always kept */
    unsigned long long data_size; /* page data planned so far */
    long long max_bytes;          /* of page data, 0: no limit */
    uint64_t entries[PAGEMAP_CHUNK], base_entries[PAGEMAP_CHUNK]; /* one chunk's pagemap */
} capture;

static bool read_pagemap(int fd, unsigned long long start, size_t pages, uint64_t *into)
{
    size_t bytes = pages * sizeof *into;
    off_t at = (off_t)(start / (unsigned long long)page_size() * sizeof *into);
    for (size_t done = 0; done < bytes;) {
        ssize_t n = pread(fd, (char *)into + done, bytes - done, at + (off_t)done);
        if (n <= 0)
            return false;
        done += (size_t)n;
    }
    return true;
}

/* The frame of the kernel's shared zero page (what a read of untouched anonymous memory maps),
   learned once from a page of our own; 0 when unknown. A process can map terabytes of it for
   the price of its page tables: saved, it would fill the daemon's memory with zeros. */
static uint64_t zero_frame;

static void learn_zero_page_frame(void)
{
    volatile char *page = mmap(NULL, (size_t)page_size(), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return;
    (void)page[0];
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    uint64_t entry = 0;
    if (fd >= 0 && read_pagemap(fd, (unsigned long long)(uintptr_t)page, 1, &entry) &&
        (entry & PAGEMAP_PRESENT))
        zero_frame = entry & PAGEMAP_PFN_MASK;
    if (fd >= 0)
        close(fd);
    munmap((void *)page, (size_t)page_size());
}

/* Captures run on the daemon's worker threads (common/worker.h): learned once, under
   pthread_once, so that no capture reads it half-learned. */
static uint64_t zero_page_frame(void)
{
    static pthread_once_t learned = PTHREAD_ONCE_INIT;
    pthread_once(&learned, learn_zero_page_frame);
    return zero_frame;
}

static bool is_zero_page(uint64_t entry)
{
    uint64_t zero = zero_page_frame();
    return zero && (entry & PAGEMAP_PRESENT) && (entry & PAGEMAP_PFN_MASK) == zero;
}

/* Is this page to be saved? A full image: every present page, and every page of a private file
   mapping (unwritten, it is the file's, which a full image does not rely on). A diff image:
   every page that is not the base's very page (same frame) and not untouched in both. A page
   that is the shared zero page is a hole, but in a diff image where the base has a page there
   (the clone keeps the base's page in a hole). */
static bool page_wanted(const capture *c, const process_image_mapping *m, size_t index,
                        bool always)
{
    uint64_t entry = c->entries[index];
    bool here = (entry & (PAGEMAP_PRESENT | PAGEMAP_SWAPPED)) && !is_zero_page(entry);
    if (m->inode == 0 && is_zero_page(entry) && c->base_pagemap >= 0 &&
        (c->base_entries[index] & (PAGEMAP_PRESENT | PAGEMAP_SWAPPED)) &&
        !is_zero_page(c->base_entries[index]))
        return true;
    if (c->base_pagemap < 0 || always)
        return here || m->inode != 0; /* an untouched page of a file is the file's */
    uint64_t base = c->base_entries[index];
    bool base_here = base & (PAGEMAP_PRESENT | PAGEMAP_SWAPPED);
    if (!here && !base_here)
        return false;
    bool same_frame = (entry & PAGEMAP_PRESENT) && (base & PAGEMAP_PRESENT) &&
                      (entry & PAGEMAP_PFN_MASK) == (base & PAGEMAP_PFN_MASK) &&
                      (entry & PAGEMAP_PFN_MASK) != 0;
    return !same_frame;
}

/* The binary's own writable mappings and the anonymous one right after them (its .bss, where
   the checkpoint point keeps its state): always saved whole, whatever a diff says. */
static bool always_kept(const capture *c, const process_image_mapping *m,
                        const process_image_mapping *previous)
{
    if (m->kind == PROCESS_IMAGE_STACK)
        return true;
    if (c->binary[0] && strcmp(m->path, c->binary) == 0)
        return true;
    return previous && c->binary[0] && strcmp(previous->path, c->binary) == 0 && m->inode == 0 &&
           previous->end == m->start;
}

/* Adds page `index` of m to the image: the last run grows, or a new one starts. */
static int add_page(capture *c, process_image_mapping *m, size_t index, size_t *capacity)
{
    unsigned long long page = (unsigned long long)page_size();
    process_image_run *last = m->run_count ? &m->runs[m->run_count - 1] : NULL;
    if (last && last->first_page + last->pages == index &&
        last->file_offset + last->pages * page == c->data_size) {
        last->pages++;
    } else {
        if (m->run_count == *capacity) {
            *capacity = *capacity ? *capacity * 2 : 16;
            process_image_run *bigger = realloc(m->runs, *capacity * sizeof *bigger);
            if (!bigger)
                return -ENOMEM;
            m->runs = bigger;
        }
        m->runs[m->run_count++] = (process_image_run){
            .first_page = index, .pages = 1, .file_offset = c->data_size};
    }
    c->data_size += page;
    return 0;
}

/* The mapping's pagemap is read PAGEMAP_CHUNK pages at a time: a process may map terabytes
   (reserved, never touched) and the daemon must not allocate in proportion. */
static int plan_runs(capture *c, process_image_mapping *m, bool always, char *why, size_t why_size)
{
    size_t pages = (size_t)((m->end - m->start) / (unsigned long long)page_size());
    size_t capacity = 0;
    for (size_t done = 0; done < pages; done += PAGEMAP_CHUNK) {
        size_t count = pages - done < PAGEMAP_CHUNK ? pages - done : PAGEMAP_CHUNK;
        unsigned long long from = m->start + (unsigned long long)done * (unsigned long long)page_size();
        if (!read_pagemap(c->pagemap, from, count, c->entries)) {
            snprintf(why, why_size, "cannot read the process's pagemap: %s", strerror(errno));
            return -EIO;
        }
        if (c->base_pagemap >= 0 && !read_pagemap(c->base_pagemap, from, count, c->base_entries))
            memset(c->base_entries, 0, count * sizeof *c->base_entries); /* not mapped there */
        for (size_t i = 0; i < count; i++) {
            if (!page_wanted(c, m, i, always))
                continue;
            if (add_page(c, m, done + i, &capacity) < 0) {
                snprintf(why, why_size, "out of memory for the image's runs");
                return -ENOMEM;
            }
            if (c->max_bytes > 0 && c->data_size > (unsigned long long)c->max_bytes) {
                snprintf(why, why_size, "its memory image would be over %lld MiB (the sandbox's "
                         "memory, and every page of the files it maps privately): unmap large "
                         "files and free memory, then try again", c->max_bytes >> 20);
                return -EFBIG;
            }
        }
    }
    return 0;
}

static const char *kind_name(process_image_kind kind)
{
    static const char *const names[] = {"data", "file", "special", "stack"};
    return names[kind];
}

static json_t *describe(const process_image *image)
{
    json_t *mappings = json_array();
    for (size_t i = 0; i < image->count; i++) {
        const process_image_mapping *m = &image->mappings[i];
        json_t *runs = json_array();
        for (size_t r = 0; r < m->run_count; r++)
            json_array_append_new(runs, json_pack("[I,I,I]", (json_int_t)m->runs[r].first_page,
                                                  (json_int_t)m->runs[r].pages,
                                                  (json_int_t)m->runs[r].file_offset));
        json_array_append_new(
            mappings, json_pack("{s:I, s:I, s:i, s:b, s:I, s:s, s:I, s:I, s:s, s:s, s:o}", "start",
                                (json_int_t)m->start, "end", (json_int_t)m->end, "prot", m->prot,
                                "shared", m->shared, "offset", (json_int_t)m->offset, "dev", m->dev,
                                "inode", (json_int_t)m->inode, "size", (json_int_t)m->file_size,
                                "path", m->path, "kind", kind_name(m->kind), "runs", runs));
    }
    return json_pack("{s:i, s:s, s:b, s:I, s:o}", "version", 1, "generation", image->generation,
                     "full", image->full, "brk", (json_int_t)image->brk, "mappings", mappings);
}

static int write_all_at(int fd, const void *data, size_t length, off_t at)
{
    for (size_t done = 0; done < length;) {
        ssize_t n = pwrite(fd, (const char *)data + done, length - done, at + (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        done += (size_t)n;
    }
    return 0;
}

/* Copies one run from the process into the file: through a shared mapping of the file where it
   is memory (a memfd: one copy), else through a buffer and pwrite (a disk file: ENOSPC is an
   error there, not a SIGBUS). */
static int copy_run(const capture *c, const process_image_mapping *m, const process_image_run *run,
                    int out_fd, char *window, unsigned long long data_start, char *buffer)
{
    size_t length = (size_t)run->pages * (size_t)page_size();
    unsigned long long from = m->start + run->first_page * (unsigned long long)page_size();
    for (size_t done = 0; done < length;) {
        size_t chunk = length - done < COPY_CHUNK ? length - done : COPY_CHUNK;
        char *into = window ? window + data_start + run->file_offset + done : buffer;
        struct iovec local = {.iov_base = into, .iov_len = chunk};
        struct iovec remote = {.iov_base = (void *)(uintptr_t)(from + done), .iov_len = chunk};
        ssize_t n = process_vm_readv(c->pid, &local, 1, &remote, 1, 0);
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        if (!window) {
            int rc = write_all_at(out_fd, buffer, (size_t)n,
                                  (off_t)(data_start + run->file_offset + done));
            if (rc < 0)
                return rc;
        }
        done += (size_t)n;
    }
    return 0;
}

/* A file in memory (a memfd, or image_memory's tmpfs file: nameless, on tmpfs) is written
   through a shared mapping, one copy; a file on disk through pwrite. */
static bool in_memory(int fd)
{
    struct statfs filesystem;
    struct stat status;
    return fstatfs(fd, &filesystem) == 0 && filesystem.f_type == TMPFS_MAGIC &&
           fstat(fd, &status) == 0 && status.st_nlink == 0;
}

static int write_pages(const capture *c, const process_image *image, int out_fd,
                       unsigned long long data_start, char *why, size_t why_size)
{
    unsigned long long total = data_start + c->data_size;
    char *window = NULL, *buffer = NULL;
    if (in_memory(out_fd) && ftruncate(out_fd, (off_t)total) == 0) {
        window = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, out_fd, 0);
        if (window == MAP_FAILED)
            window = NULL;
        /* Its pages allocated in one call rather than one fault each (~a third of the time the
           copy took). A populate that fails (no room in the tmpfs, or Linux < 5.14) leaves the
           copy to pwrite, which reports ENOSPC: through the mapping it would be a SIGBUS. */
        if (window && madvise(window, total, MADV_POPULATE_WRITE) < 0) {
            munmap(window, total);
            window = NULL;
        }
    }
    if (!window && !(buffer = malloc(COPY_CHUNK))) {
        snprintf(why, why_size, "out of memory for the copy buffer");
        return -ENOMEM;
    }
    int rc = 0;
    for (size_t i = 0; i < image->count && rc == 0; i++)
        for (size_t r = 0; r < image->mappings[i].run_count && rc == 0; r++)
            rc = copy_run(c, &image->mappings[i], &image->mappings[i].runs[r], out_fd, window,
                          data_start, buffer);
    if (window)
        munmap(window, total);
    free(buffer);
    if (rc == 0 && !window && ftruncate(out_fd, (off_t)total) < 0)
        rc = -errno; /* trailing holes */
    if (rc < 0)
        snprintf(why, why_size, "%s the process's memory: %s",
                 rc == -ENOSPC ? "no space on the disk for" : "cannot copy", strerror(-rc));
    return rc;
}

static int write_header(json_t *description, int out_fd, unsigned long long *data_start,
                        char *why, size_t why_size)
{
    char *text = json_dumps(description, JSON_COMPACT);
    if (!text) {
        snprintf(why, why_size, "out of memory for the image's description");
        return -ENOMEM;
    }
    uint64_t length = strlen(text);
    unsigned char prefix[HEADER_PREFIX];
    memcpy(prefix, IMAGE_MAGIC, 8);
    for (int i = 0; i < 8; i++)
        prefix[8 + i] = (unsigned char)(length >> (8 * i));
    int rc = write_all_at(out_fd, prefix, sizeof prefix, 0);
    if (rc == 0)
        rc = write_all_at(out_fd, text, length, HEADER_PREFIX);
    free(text);
    unsigned long long page = (unsigned long long)page_size();
    *data_start = (HEADER_PREFIX + length + page - 1) / page * page;
    if (rc < 0)
        snprintf(why, why_size, "%s the image's header: %s",
                 rc == -ENOSPC ? "no space on the disk for" : "cannot write", strerror(-rc));
    return rc;
}

static int open_pagemap(pid_t pid, char *why, size_t why_size)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/pagemap", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        snprintf(why, why_size, "cannot open %s: %s", path, strerror(errno));
    return fd;
}

/* Why a writable MAP_SHARED mapping refuses the image: a copy would either share the memory
   with the source (a write in one seen in the other) or lose it, so it is refused, naming the
   mapping and what the user does about it. Anonymous shared memory (mmap.mmap(-1, ...,
   MAP_SHARED), or /dev/zero mapped shared) shows in /proc/PID/maps as "/dev/zero (deleted)". */
static void describe_shared_mapping(const process_image_mapping *m, char *why, size_t why_size)
{
    bool anonymous = m->path[0] == '\0' || strncmp(m->path, "/dev/zero", 9) == 0;
    snprintf(why, why_size,
             "holds memory shared with other processes, which a copy would share or lose: %s%s "
             "mapped MAP_SHARED at 0x%llx (%llu KiB); close that mapping (mmap_object.close() "
             "or del it, or unmap the shared memory) and try again",
             anonymous ? "anonymous memory" : "the file ", anonymous ? "" : m->path, m->start,
             (m->end - m->start) >> 10);
}

/* Refuses what an image cannot hold; fills in the binary's path. */
static int check_mappings(capture *c, const process_image *image, char *why, size_t why_size)
{
    for (size_t i = 0; i < image->count; i++) {
        const process_image_mapping *m = &image->mappings[i];
        if (m->shared && (m->prot & PROT_WRITE)) {
            describe_shared_mapping(m, why, why_size);
            return -EBUSY;
        }
        if (!c->binary[0] && strstr(m->path, "/cellbox-kernel"))
            snprintf(c->binary, sizeof c->binary, "%s", m->path);
    }
    return 0;
}

static const process_image_mapping *find_same(const process_image_mapping *list, size_t count,
                                              const process_image_mapping *wanted);

/* A diff image: a file mapping the base does not have at the same place is saved whole (as
   data), every page, touched or not: the restoring clone, a copy of the base, has nothing of
   that file there to keep. A library a cell imported after the clone; the image a restored
   kernel's memory is mapped from, when that kernel is forked in turn. */
static void mark_new_files(process_image *image, pid_t base_pid, bool *new_file)
{
    char maps_path[64], why[256];
    snprintf(maps_path, sizeof maps_path, "/proc/%d/maps", (int)base_pid);
    size_t count = 0;
    process_image_mapping *base = read_maps(maps_path, &count, why, sizeof why);
    for (size_t i = 0; base && i < image->count; i++) {
        process_image_mapping *m = &image->mappings[i];
        bool file_backed = m->kind == PROCESS_IMAGE_FILE ||
                           (m->kind == PROCESS_IMAGE_DATA && m->inode != 0);
        if (!file_backed)
            continue;
        const process_image_mapping *there = find_same(base, count, m);
        if (!there || there->inode != m->inode || there->offset != m->offset ||
            strcmp(there->dev, m->dev) != 0) {
            m->kind = PROCESS_IMAGE_DATA;
            new_file[i] = true;
        }
    }
    free(base);
}

/* Has the process its own copy of any page of this read-only private file mapping? A library's
   RELRO part is: the loader wrote its relocations, then made it read-only. Such a mapping is
   the process's data, not the file's: a full image saves it whole, as it saves a writable one
   (a restorer mapping the file there again would lose the relocations). */
static bool has_private_copies(capture *c, const process_image_mapping *m)
{
    unsigned long long page = (unsigned long long)page_size();
    size_t pages = (size_t)((m->end - m->start) / page);
    for (size_t done = 0; done < pages;) {
        size_t chunk = pages - done < PAGEMAP_CHUNK ? pages - done : PAGEMAP_CHUNK;
        if (!read_pagemap(c->pagemap, m->start + done * page, chunk, c->entries))
            return true; /* unknown: saved, which is never wrong */
        for (size_t i = 0; i < chunk; i++)
            if ((c->entries[i] & PAGEMAP_PRESENT) && !(c->entries[i] & PAGEMAP_FILE))
                return true;
        done += chunk;
    }
    return false;
}

/* Each read-only file mapping's file size, so that a restorer that maps the file itself (one
   the zygote it restores into does not map there) can tell it is the same file. Read through
   /proc/PID/map_files: the file the process mapped, whatever its path now names. */
static void record_file_sizes(capture *c, process_image *image)
{
    for (size_t i = 0; i < image->count; i++) {
        process_image_mapping *m = &image->mappings[i];
        if (m->kind != PROCESS_IMAGE_FILE)
            continue;
        if (image->full && !m->shared && has_private_copies(c, m)) {
            m->kind = PROCESS_IMAGE_DATA;
            continue;
        }
        char link[96];
        struct stat file;
        snprintf(link, sizeof link, "/proc/%d/map_files/%llx-%llx", (int)c->pid, m->start, m->end);
        if (stat(link, &file) == 0 && file.st_ino == m->inode)
            m->file_size = (unsigned long long)file.st_size;
    }
}

static int plan_image(capture *c, process_image *image, pid_t base_pid, char *why,
                      size_t why_size)
{
    int rc = check_mappings(c, image, why, why_size);
    if (rc == 0)
        record_file_sizes(c, image);
    bool *new_file = calloc(image->count + 1, sizeof *new_file);
    if (!new_file)
        rc = -ENOMEM;
    if (rc == 0 && base_pid > 0)
        mark_new_files(image, base_pid, new_file);
    for (size_t i = 0; i < image->count && rc == 0; i++) {
        process_image_mapping *m = &image->mappings[i];
        if (strcmp(m->path, "[heap]") == 0 && m->end > image->brk)
            image->brk = m->end;
        if (m->kind != PROCESS_IMAGE_DATA && m->kind != PROCESS_IMAGE_STACK)
            continue;
        if (!(m->prot & PROT_READ))
            continue; /* a guard or reservation: nothing readable to keep */
        bool always = new_file[i] || always_kept(c, m, i > 0 ? &image->mappings[i - 1] : NULL);
        rc = plan_runs(c, m, always, why, why_size);
    }
    free(new_file);
    return rc;
}

int process_image_capture(pid_t pid, pid_t base_pid, const char *generation, int out_fd,
                          process_image_stats *stats, char *why, size_t why_size)
{
    return process_image_capture_at_most(pid, base_pid, generation, out_fd, 0, stats, why,
                                         why_size);
}

int process_image_capture_at_most(pid_t pid, pid_t base_pid, const char *generation, int out_fd,
                                  long long max_bytes, process_image_stats *stats, char *why,
                                  size_t why_size)
{
    char maps_path[64];
    snprintf(maps_path, sizeof maps_path, "/proc/%d/maps", (int)pid);
    process_image *image = calloc(1, sizeof *image);
    capture *c = calloc(1, sizeof *c); /* its pagemap buffers: 64 KiB */
    if (!image || !c) {
        free(image), free(c);
        snprintf(why, why_size, "out of memory");
        return -ENOMEM;
    }
    *c = (capture){.pid = pid, .pagemap = -1, .base_pagemap = -1, .max_bytes = max_bytes};
    image->full = base_pid <= 0;
    snprintf(image->generation, sizeof image->generation, "%s", image->full ? "" : generation);
    image->mappings = read_maps(maps_path, &image->count, why, why_size);
    int rc = image->mappings ? 0 : -EIO;
    if (rc == 0 && (c->pagemap = open_pagemap(pid, why, why_size)) < 0)
        rc = -EIO;
    if (rc == 0 && base_pid > 0 && (c->base_pagemap = open_pagemap(base_pid, why, why_size)) < 0)
        rc = -EIO;
    if (rc == 0)
        rc = plan_image(c, image, base_pid, why, why_size);
    unsigned long long data_start = 0;
    if (rc == 0) {
        json_t *description = describe(image);
        rc = write_header(description, out_fd, &data_start, why, why_size);
        json_decref(description);
    }
    if (rc == 0)
        rc = write_pages(c, image, out_fd, data_start, why, why_size);
    if (rc == 0 && stats) {
        stats->mappings = image->count;
        stats->bytes = (long long)c->data_size;
        stats->pages = (long long)(c->data_size / (unsigned long long)page_size());
    }
    if (c->pagemap >= 0)
        close(c->pagemap);
    if (c->base_pagemap >= 0)
        close(c->base_pagemap);
    free(c);
    process_image_free(image);
    return rc;
}

/* ---- reading it back ---- */

#define WAIT_TRIES 64 /* EINTR retries of the lock wait */

int process_image_wait_written(int fd)
{
    struct flock lock = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    for (int tries = 0; tries < WAIT_TRIES; tries++) {
        if (fcntl(fd, F_OFD_SETLKW, &lock) == 0) {
            lock.l_type = F_UNLCK;
            return fcntl(fd, F_OFD_SETLK, &lock);
        }
        if (errno != EINTR)
            return -1;
    }
    return -1;
}

static process_image_kind kind_from_name(const char *name)
{
    if (strcmp(name, "file") == 0)
        return PROCESS_IMAGE_FILE;
    if (strcmp(name, "special") == 0)
        return PROCESS_IMAGE_SPECIAL;
    if (strcmp(name, "stack") == 0)
        return PROCESS_IMAGE_STACK;
    return PROCESS_IMAGE_DATA;
}

static bool read_runs(json_t *runs, process_image_mapping *m, unsigned long long data_size,
                      char *why, size_t why_size)
{
    unsigned long long page = (unsigned long long)page_size();
    unsigned long long pages = (m->end - m->start) / page;
    m->run_count = json_array_size(runs);
    m->runs = m->run_count ? calloc(m->run_count, sizeof *m->runs) : NULL;
    if (m->run_count && !m->runs) {
        snprintf(why, why_size, "out of memory");
        return false;
    }
    for (size_t r = 0; r < m->run_count; r++) {
        json_t *run = json_array_get(runs, r);
        process_image_run *into = &m->runs[r];
        into->first_page = (unsigned long long)json_integer_value(json_array_get(run, 0));
        into->pages = (unsigned long long)json_integer_value(json_array_get(run, 1));
        into->file_offset = (unsigned long long)json_integer_value(json_array_get(run, 2));
        if (into->pages == 0 || into->first_page >= pages || into->pages > pages - into->first_page ||
            into->file_offset % page || into->file_offset > data_size ||
            into->pages * page > data_size - into->file_offset) {
            snprintf(why, why_size, "a run of the mapping at 0x%llx lies outside it or the file",
                     m->start);
            return false;
        }
    }
    return true;
}

static bool read_mapping(json_t *entry, process_image_mapping *m, unsigned long long data_size,
                         char *why, size_t why_size)
{
    unsigned long long page = (unsigned long long)page_size();
    memset(m, 0, sizeof *m);
    m->start = (unsigned long long)json_integer_value(json_object_get(entry, "start"));
    m->end = (unsigned long long)json_integer_value(json_object_get(entry, "end"));
    m->prot = (int)json_integer_value(json_object_get(entry, "prot"));
    m->shared = json_is_true(json_object_get(entry, "shared"));
    m->offset = (unsigned long long)json_integer_value(json_object_get(entry, "offset"));
    m->inode = (unsigned long long)json_integer_value(json_object_get(entry, "inode"));
    m->file_size = (unsigned long long)json_integer_value(json_object_get(entry, "size"));
    snprintf(m->dev, sizeof m->dev, "%s", json_string_value(json_object_get(entry, "dev")) ?: "");
    snprintf(m->path, sizeof m->path, "%s", json_string_value(json_object_get(entry, "path")) ?: "");
    m->kind = kind_from_name(json_string_value(json_object_get(entry, "kind")) ?: "");
    if (m->start >= m->end || m->start % page || m->end % page ||
        (m->prot & ~(PROT_READ | PROT_WRITE | PROT_EXEC))) {
        snprintf(why, why_size, "a mapping of the image is malformed (0x%llx-0x%llx)", m->start,
                 m->end);
        return false;
    }
    return read_runs(json_object_get(entry, "runs"), m, data_size, why, why_size);
}

static json_t *read_description(int fd, unsigned long long *data_start, unsigned long long *file_size,
                                char *why, size_t why_size)
{
    unsigned char prefix[HEADER_PREFIX];
    struct stat status;
    if (fstat(fd, &status) < 0 || pread(fd, prefix, sizeof prefix, 0) != (ssize_t)sizeof prefix ||
        memcmp(prefix, IMAGE_MAGIC, 8) != 0) {
        set_why(why, why_size, "%s", "not a cellbox process image (no CBXIMG01 header)");
        return NULL;
    }
    uint64_t length = 0;
    for (int i = 0; i < 8; i++)
        length |= (uint64_t)prefix[8 + i] << (8 * i);
    if (length == 0 || length > MAX_DESCRIPTION || HEADER_PREFIX + length > (uint64_t)status.st_size) {
        set_why(why, why_size, "%s", "the image's description has an impossible length");
        return NULL;
    }
    char *text = malloc(length + 1);
    if (!text || pread(fd, text, length, HEADER_PREFIX) != (ssize_t)length) {
        free(text);
        set_why(why, why_size, "%s", "cannot read the image's description");
        return NULL;
    }
    text[length] = '\0';
    json_t *description = json_loads(text, 0, NULL);
    free(text);
    if (!json_is_object(description)) {
        json_decref(description);
        set_why(why, why_size, "%s", "the image's description is not a JSON object");
        return NULL;
    }
    unsigned long long page = (unsigned long long)page_size();
    *data_start = (HEADER_PREFIX + length + page - 1) / page * page;
    *file_size = (unsigned long long)status.st_size;
    return description;
}

process_image *process_image_read_header(int fd, char *why, size_t why_size)
{
    unsigned long long data_start, file_size;
    json_t *description = read_description(fd, &data_start, &file_size, why, why_size);
    if (!description)
        return NULL;
    json_t *mappings = json_object_get(description, "mappings");
    process_image *image = calloc(1, sizeof *image);
    bool good = image && json_is_array(mappings) && json_array_size(mappings) <= MAX_MAPPINGS &&
                json_integer_value(json_object_get(description, "version")) == 1;
    if (!good)
        set_why(why, why_size, "%s", "the image's description has no mappings or another version");
    if (good) {
        image->full = json_is_true(json_object_get(description, "full"));
        image->brk = (unsigned long long)json_integer_value(json_object_get(description, "brk"));
        image->data_start = data_start;
        snprintf(image->generation, sizeof image->generation, "%s",
                 json_string_value(json_object_get(description, "generation")) ?: "");
        image->mappings = calloc(json_array_size(mappings) + 1, sizeof *image->mappings);
        good = image->mappings != NULL;
    }
    unsigned long long data_size = file_size > data_start ? file_size - data_start : 0;
    for (size_t i = 0; good && i < json_array_size(mappings); i++) {
        good = read_mapping(json_array_get(mappings, i), &image->mappings[i], data_size, why, why_size);
        image->count = i + 1;
        if (good && i > 0 && image->mappings[i].start < image->mappings[i - 1].end) {
            snprintf(why, why_size, "the image's mappings overlap or are out of order at 0x%llx",
                     image->mappings[i].start);
            good = false;
        }
    }
    json_decref(description);
    if (!good) {
        process_image_free(image);
        return NULL;
    }
    /* From here on the runs' offsets are from the file's start, as the header says to callers. */
    for (size_t i = 0; i < image->count; i++)
        for (size_t r = 0; r < image->mappings[i].run_count; r++)
            image->mappings[i].runs[r].file_offset += data_start;
    return image;
}

/* ---- does a process fit ---- */

static const process_image_mapping *find_same(const process_image_mapping *list, size_t count,
                                              const process_image_mapping *wanted)
{
    for (size_t i = 0; i < count; i++)
        if (list[i].start == wanted->start && list[i].end == wanted->end)
            return &list[i];
    return NULL;
}

/* Does `wanted` lie over any mapping of `file` in list? */
static bool overlaps_file(const process_image_mapping *list, size_t count,
                          const process_image_mapping *wanted, const char *file)
{
    for (size_t i = 0; i < count; i++)
        if (list[i].start < wanted->end && wanted->start < list[i].end &&
            strcmp(list[i].path, file) == 0)
            return true;
    return false;
}

bool process_image_same_file_mapping(const process_image_mapping *a, const process_image_mapping *b)
{
    return a->start == b->start && a->end == b->end && a->inode == b->inode &&
           strcmp(a->dev, b->dev) == 0 && a->offset == b->offset && a->prot == b->prot;
}

bool process_image_fits_mapping_files(const process_image *image, const char *maps_path,
                                      const char *executable, char *why, size_t why_size)
{
    if (!image->full)
        return process_image_fits(image, maps_path, why, why_size);
    size_t count = 0;
    process_image_mapping *live = read_maps(maps_path, &count, why, why_size);
    if (!live)
        return false;
    bool fits = true;
    for (size_t i = 0; i < image->count && fits; i++) {
        const process_image_mapping *m = &image->mappings[i];
        const process_image_mapping *there = find_same(live, count, m);
        bool same = there && process_image_same_file_mapping(there, m);
        if (m->kind == PROCESS_IMAGE_SPECIAL && strcmp(m->path, "[vdso]") == 0 && !same) {
            snprintf(why, why_size, "the kernel's [vdso] is not at 0x%llx", m->start);
            fits = false;
        } else if (m->kind != PROCESS_IMAGE_FILE || same) {
            continue;
        } else if (strcmp(m->path, executable) == 0 || overlaps_file(live, count, m, executable)) {
            /* the restorer runs from the executable: it cannot be replaced under it */
            snprintf(why, why_size, "the zygote's build changed: %s at 0x%llx is %s", m->path,
                     m->start, there ? "another file" : "not mapped there");
            fits = false;
        } else if (m->file_size == 0 || m->path[0] != '/') {
            snprintf(why, why_size,
                     "the image does not say which file %s at 0x%llx is (an "
                     "image from an older cellbox)",
                     m->path, m->start);
            fits = false;
        }
    }
    free(live);
    return fits;
}

bool process_image_fits(const process_image *image, const char *maps_path, char *why,
                        size_t why_size)
{
    size_t count = 0;
    process_image_mapping *live = read_maps(maps_path, &count, why, why_size);
    if (!live)
        return false;
    bool fits = true;
    for (size_t i = 0; i < image->count && fits; i++) {
        const process_image_mapping *m = &image->mappings[i];
        if (m->kind != PROCESS_IMAGE_FILE && !(m->kind == PROCESS_IMAGE_SPECIAL && strcmp(m->path, "[vdso]") == 0))
            continue;
        const process_image_mapping *there = find_same(live, count, m);
        /* Paths differ between mount namespaces; the device and inode name the file. */
        if (!there || there->inode != m->inode || strcmp(there->dev, m->dev) != 0 ||
            there->offset != m->offset || there->prot != m->prot) {
            snprintf(why, why_size, "the zygote's build or layout changed: %s at 0x%llx is %s",
                     m->path, m->start, there ? "another file" : "not mapped there");
            fits = false;
        }
    }
    free(live);
    return fits;
}
