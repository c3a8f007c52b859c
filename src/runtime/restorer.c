/* restorer — see restorer.h. Two halves: the plan (ordinary C, libc allowed) and execute_plan
 * (raw system calls on a scratch stack, touching only the plan: from its first step on, libc's
 * memory is the image's, not the clone's).
 *
 * The plan is made in a child process (a raw clone: no atfork handlers), which writes it into a
 * shared scratch mapping and exits. The restoring process itself must not write its heap: a diff
 * image leaves out every page the kernel had not written since it was cloned, and the restore
 * keeps the clone's page there. A malloc in the clone (a FILE, jansson's objects) rewrites free
 * chunks' links in such pages, which the restored heap then finds corrupted ("corrupted
 * double-linked list", seen). */
#include "runtime/restorer.h"

#include <asm/prctl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/checkpoint_point.h"
#include "sandbox/process_image.h"

#define PLANNER_WAIT_MS 120000 /* a planner still at work after this is taken for dead */
#define PLANNER_POLL_MS 50       /* how soon a planner killed without a word is noticed */

enum planner_state { PLANNER_WORKING, PLANNER_PLANNED, PLANNER_FAILED };
#define MAP_RUN_PAGES 16 /* a run this long or longer is mapped from the image, a shorter one copied */
#define SCRATCH_STACK_SIZE (64u << 10)
#define SCRATCH_SIZE (16ull << 20) /* the plan (~400 000 steps) and its stack; NORESERVE */
#define SCRATCH_WHY_SIZE 512
/* Where the scratch mapping is looked for: 1 GiB steps from 32 TiB, well away from the zygote's
   mappings (near 0x55.. and 0x7f..); the planner checks it is free in the image too. */
#define SCRATCH_SEARCH_FROM 0x200000000000ull
#define SCRATCH_SEARCH_TRIES 64
#define SCRATCH_SEARCH_STEP (1ull << 30)

typedef enum step_kind {
    STEP_BRK,           /* brk(address) */
    STEP_UNMAP,         /* munmap: the clone has it, the image does not */
    STEP_MAP_ANONYMOUS, /* fresh zeroed memory where the image has holes */
    STEP_MAP_IMAGE,     /* MAP_PRIVATE|MAP_FIXED from the image at file_offset */
    STEP_COPY,          /* pread from the image into place ([stack], short runs) */
    STEP_PROTECT,       /* mprotect to the saved protection */
    STEP_MAP_FILE,      /* a file the clone does not map there: opened by path, checked to be
                           the recorded file (device, inode, size), mapped at file_offset */
} step_kind;

typedef struct step {
    step_kind kind;
    int prot;
    uint64_t address, length, file_offset;
    uint32_t path_at;             /* STEP_MAP_FILE: its path, from the plan's start */
    bool shared;                  /* STEP_MAP_FILE: MAP_SHARED (read-only), else MAP_PRIVATE */
    uint64_t device, inode, size; /* STEP_MAP_FILE: what fstat must say, as the planner saw it */
} step;

typedef struct plan {
    checkpoint_scratch_header header; /* first: checkpoint_point unmaps the scratch by it */
    char why[SCRATCH_WHY_SIZE];       /* the planner's reason, when it fails */
    int planner_state;                /* PLANNER_WORKING, then _PLANNED or _FAILED (a futex) */
    int image_fd;
    const checkpoint_resume *resume;  /* read only after every step: then it is the image's */
    size_t count;
    step steps[];
} plan;

typedef struct plan_builder {
    step *steps;
    size_t count, capacity;
    char *paths; /* STEP_MAP_FILE's paths, NUL-terminated, one after another */
    size_t paths_length, paths_capacity;
} plan_builder;

static plan *scratch_plan; /* the planner's (child's) view of the shared scratch */

/* The planner's end, told to the restoring process through the scratch (a futex word). */
static void __attribute__((noreturn)) end_planner(int state)
{
    __atomic_store_n(&scratch_plan->planner_state, state, __ATOMIC_RELEASE);
    syscall(SYS_futex, &scratch_plan->planner_state, FUTEX_WAKE, 1, NULL, NULL, 0);
    _exit(state == PLANNER_PLANNED ? 0 : 1);
}

static void __attribute__((noreturn)) fail(const char *why)
{
    snprintf(scratch_plan->why, sizeof scratch_plan->why, "%s", why);
    end_planner(PLANNER_FAILED);
}

static void add_step(plan_builder *b, step_kind kind, uint64_t address, uint64_t length, int prot,
                     uint64_t file_offset)
{
    if (length == 0)
        return;
    if (b->count == b->capacity) {
        b->capacity = b->capacity ? 2 * b->capacity : 256;
        b->steps = realloc(b->steps, b->capacity * sizeof *b->steps);
        if (!b->steps)
            fail("out of memory planning the restore");
    }
    b->steps[b->count++] = (step){.kind = kind, .prot = prot, .address = address,
                                  .length = length, .file_offset = file_offset};
}

/* What the clone has outside every mapping of the image goes (not the kernel's own). */
static void plan_unmaps(plan_builder *b, const process_image *image,
                        const process_image_mapping *live, size_t live_count)
{
    size_t image_count = process_image_mapping_count(image);
    uint64_t scratch = (uint64_t)(uintptr_t)scratch_plan;
    for (size_t i = 0; i < live_count; i++) {
        if (live[i].kind == PROCESS_IMAGE_SPECIAL || live[i].start == scratch)
            continue;
        uint64_t cursor = live[i].start, end = live[i].end;
        for (size_t j = 0; j < image_count && cursor < end; j++) {
            const process_image_mapping *m = process_image_mapping_at(image, j);
            if (m->end <= cursor || m->start >= end)
                continue;
            if (m->start > cursor)
                add_step(b, STEP_UNMAP, cursor, m->start - cursor, 0, 0);
            cursor = m->end > cursor ? m->end : cursor;
        }
        if (cursor < end)
            add_step(b, STEP_UNMAP, cursor, end - cursor, 0, 0);
    }
}

/* A diff image keeps the clone's pages (the zygote's) where the clone has memory: only the
   parts of the mapping the clone lacks are made fresh. A full image replaces all of it. */
static void plan_fresh_memory(plan_builder *b, const process_image_mapping *m, bool full,
                              const process_image_mapping *live, size_t live_count)
{
    int prot = PROT_READ | PROT_WRITE;
    if (full) {
        add_step(b, STEP_MAP_ANONYMOUS, m->start, m->end - m->start, prot, 0);
        return;
    }
    uint64_t cursor = m->start;
    for (size_t i = 0; i < live_count && cursor < m->end; i++) {
        if (live[i].end <= cursor || live[i].start >= m->end)
            continue;
        if (live[i].start > cursor)
            add_step(b, STEP_MAP_ANONYMOUS, cursor, live[i].start - cursor, prot, 0);
        cursor = live[i].end;
    }
    if (cursor < m->end)
        add_step(b, STEP_MAP_ANONYMOUS, cursor, m->end - cursor, prot, 0);
}

static const process_image_mapping *live_stack(const process_image_mapping *live, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (live[i].kind == PROCESS_IMAGE_STACK)
            return &live[i];
    return NULL;
}

/* [stack] grows down: its vma is never replaced; its saved pages are copied into the part of it
   the clone has (the zygote's main stack: the kernel runs on its own clone stack). */
static void plan_stack(plan_builder *b, const process_image_mapping *m,
                       const process_image_mapping *stack)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    for (size_t r = 0; stack && r < m->run_count; r++) {
        uint64_t from = m->start + m->runs[r].first_page * page;
        uint64_t to = from + m->runs[r].pages * page, offset = m->runs[r].file_offset;
        if (from < stack->start) {
            offset += stack->start - from;
            from = stack->start;
        }
        if (to > stack->end)
            to = stack->end;
        if (from < to)
            add_step(b, STEP_COPY, from, to - from, 0, offset);
    }
}

/* A read-only file mapping of the image the clone lacks there (a full image: a module imported
   after the kernel was cloned, or a zygote of another layout). The planner runs inside the
   sandbox, locked down: it can open only what the sandbox may read. The file must be the one the
   image recorded; the executing step checks the descriptor it maps again, so a file swapped in
   between is refused too. */
static void plan_file(plan_builder *b, const process_image_mapping *m)
{
    char why[512];
    struct stat file;
    int fd = open(m->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, sizeof why, "the image maps %.300s, which cannot be opened here: %s", m->path,
                 strerror(errno));
        fail(why);
    }
    unsigned int major_number = 0, minor_number = 0;
    bool same = fstat(fd, &file) == 0 &&
                sscanf(m->dev, "%x:%x", &major_number, &minor_number) == 2 &&
                major(file.st_dev) == major_number && minor(file.st_dev) == minor_number &&
                (unsigned long long)file.st_ino == m->inode &&
                (unsigned long long)file.st_size == m->file_size && S_ISREG(file.st_mode);
    close(fd);
    if (!same) {
        snprintf(why, sizeof why,
                 "%.300s is not the file the image maps (its device, inode or "
                 "size changed since the checkpoint)",
                 m->path);
        fail(why);
    }
    size_t length = strlen(m->path) + 1;
    if (b->paths_length + length > b->paths_capacity) {
        b->paths_capacity = 2 * (b->paths_length + length) + 4096;
        if (!(b->paths = realloc(b->paths, b->paths_capacity)))
            fail("out of memory planning the restore");
    }
    memcpy(b->paths + b->paths_length, m->path, length);
    add_step(b, STEP_MAP_FILE, m->start, m->end - m->start, m->prot, m->offset);
    step *s = &b->steps[b->count - 1];
    s->path_at = (uint32_t)b->paths_length; /* made relative to the plan by write_plan */
    s->shared = m->shared;
    s->device = (uint64_t)file.st_dev;
    s->inode = (uint64_t)file.st_ino;
    s->size = (uint64_t)file.st_size;
    b->paths_length += length;
}

static const process_image_mapping *live_same(const process_image_mapping *live, size_t count,
                                              const process_image_mapping *m)
{
    for (size_t i = 0; i < count; i++)
        if (process_image_same_file_mapping(&live[i], m))
            return &live[i];
    return NULL;
}

static void plan_mappings(plan_builder *b, const process_image *image,
                          const process_image_mapping *live, size_t live_count)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    bool full = process_image_is_full(image);
    for (size_t i = 0; i < process_image_mapping_count(image); i++) {
        const process_image_mapping *m = process_image_mapping_at(image, i);
        if (m->kind == PROCESS_IMAGE_STACK) {
            plan_stack(b, m, live_stack(live, live_count));
            continue;
        }
        if (m->kind == PROCESS_IMAGE_FILE && !live_same(live, live_count, m)) {
            plan_file(b, m);
            continue;
        }
        if (m->kind != PROCESS_IMAGE_DATA)
            continue;
        plan_fresh_memory(b, m, full, live, live_count);
        /* Short runs are copied into place, long ones mapped: each mapped run splits the
           mapping it lands in, and a diff image's scattered pages made a fork of 679 mappings
           one of ~2 600 (every later fork, image and exit of it paying for them); its long runs
           (the data) stay shared with the image, read only when touched. A copy needs the
           memory writable until the protections are put back below; and in a diff image the
           clone's own memory there may be read-only whatever the image's is (a source that was
           itself restored after a daemon restart has another layout than this zygote: its
           writable data may lie where the zygote has a library's read-only pages). */
        if (m->run_count > 0 && (!(m->prot & PROT_WRITE) || !full))
            add_step(b, STEP_PROTECT, m->start, m->end - m->start, PROT_READ | PROT_WRITE, 0);
        for (size_t r = 0; r < m->run_count; r++)
            add_step(b, m->runs[r].pages < MAP_RUN_PAGES ? STEP_COPY : STEP_MAP_IMAGE,
                     m->start + m->runs[r].first_page * page, m->runs[r].pages * page, m->prot,
                     m->runs[r].file_offset);
        add_step(b, STEP_PROTECT, m->start, m->end - m->start, m->prot, 0);
    }
}

static bool overlaps_image(uint64_t start, uint64_t end, const process_image *image)
{
    for (size_t i = 0; i < process_image_mapping_count(image); i++) {
        const process_image_mapping *m = process_image_mapping_at(image, i);
        if (m->start < end && start < m->end)
            return true;
    }
    return false;
}

/* The plan into the scratch mapping, which must be free in the image too. */
static void write_plan(const plan_builder *b, const process_image *image)
{
    uint64_t start = (uint64_t)(uintptr_t)scratch_plan;
    if (overlaps_image(start, start + SCRATCH_SIZE, image))
        fail("the restorer's scratch memory lies where the image has memory");
    size_t paths_at = sizeof(plan) + b->count * sizeof(step);
    if (paths_at + b->paths_length > SCRATCH_SIZE - SCRATCH_STACK_SIZE)
        fail("the image has too many mappings for the restorer's plan");
    scratch_plan->count = b->count;
    memcpy(scratch_plan->steps, b->steps, b->count * sizeof(step));
    if (b->paths_length)
        memcpy((char *)scratch_plan + paths_at, b->paths, b->paths_length);
    for (size_t i = 0; i < b->count; i++)
        if (scratch_plan->steps[i].kind == STEP_MAP_FILE)
            scratch_plan->steps[i].path_at += (uint32_t)paths_at;
}

/* In the planner (a child): everything libc may be used for. Exits 0 with the plan written. */
static void __attribute__((noreturn)) make_plan(int image_fd)
{
    char why[512];
    /* A fork's clone gets here while the daemon may still be writing the image (its sandbox was
       made meanwhile): the planner waits for it, already forked, so that only planning is left. */
    if (process_image_wait_written(image_fd) < 0) {
        snprintf(why, sizeof why, "cannot wait for the image to be written: %s", strerror(errno));
        fail(why);
    }
    process_image *image = process_image_read_header(image_fd, why, sizeof why);
    if (!image)
        fail(why);
    char executable[PATH_MAX];
    ssize_t length = readlink("/proc/self/exe", executable, sizeof executable - 1);
    executable[length > 0 ? length : 0] = '\0';
    if (!process_image_fits_mapping_files(image, "/proc/self/maps", executable, why, sizeof why))
        fail(why);
    size_t live_count = 0;
    process_image_mapping *live = process_image_maps("/proc/self/maps", &live_count, why, sizeof why);
    if (!live)
        fail(why);
    plan_builder builder = {0};
    if (process_image_brk(image))
        add_step(&builder, STEP_BRK, process_image_brk(image), 1, 0, 0);
    plan_unmaps(&builder, image, live, live_count);
    plan_mappings(&builder, image, live, live_count);
    write_plan(&builder, image);
    end_planner(PLANNER_PLANNED);
}

/* ---- the point of no return: raw system calls only ---- */

#if CONTEXT_SWITCH_SUPPORTED
static inline __attribute__((always_inline)) long raw_syscall(long number, long a, long b, long c,
                                                              long d, long e, long f)
{
    long result;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return result;
}

static inline __attribute__((always_inline)) void die_raw(const char *message, long length)
{
    raw_syscall(SYS_write, 2, (long)message, length, 0, 0, 0);
    raw_syscall(SYS_exit_group, RESTORER_FAILED_STATUS, 0, 0, 0, 0, 0);
    __builtin_unreachable();
}

#define DIE_RAW(text) die_raw(text, (long)sizeof(text) - 1)

static inline __attribute__((always_inline)) char *put_text(char *at, const char *text)
{
    while (*text)
        *at++ = *text++;
    return at;
}

static inline __attribute__((always_inline)) char *put_number(char *at, uint64_t value, unsigned base)
{
    char digits[24];
    int count = 0;
    do {
        digits[count++] = "0123456789abcdef"[value % base];
        value /= base;
    } while (value);
    while (count)
        *at++ = digits[--count];
    return at;
}

/* Which step could not be put in place, where, and the kernel's errno: raw, as the plan runs
   (no libc: its data may be the image's by now). */
static void __attribute__((noreturn, noinline, no_stack_protector)) die_at_step(size_t index,
                                                                               const step *s,
                                                                               long error)
{
    char line[200], *at = line;
    const char *kind = s->kind == STEP_UNMAP          ? "unmap"
                       : s->kind == STEP_MAP_ANONYMOUS ? "anonymous map"
                       : s->kind == STEP_MAP_IMAGE     ? "map from the image"
                       : s->kind == STEP_COPY          ? "copy from the image"
                       : s->kind == STEP_PROTECT       ? "protect"
                                                       : "other";
    at = put_text(at, "restore failed: a mapping of the image could not be put in place (step ");
    at = put_number(at, index, 10);
    at = put_text(at, ", ");
    at = put_text(at, kind);
    at = put_text(at, " at 0x");
    at = put_number(at, s->address, 16);
    at = put_text(at, ", ");
    at = put_number(at, s->length, 10);
    at = put_text(at, " bytes: errno ");
    at = put_number(at, (uint64_t)(error < 0 ? -error : error), 10);
    at = put_text(at, ")\n");
    die_raw(line, at - line);
    __builtin_unreachable();
}

/* 0, or pread's -errno (-EIO: the image ended before the run did). */
static inline __attribute__((always_inline)) long copy_into_place(const plan *p, const step *s)
{
    uint64_t done = 0;
    for (int tries = 0; done < s->length && tries < 1024; tries++) {
        long n = raw_syscall(SYS_pread64, p->image_fd, (long)(s->address + done),
                             (long)(s->length - done), (long)(s->file_offset + done), 0, 0);
        if (n <= 0)
            return n < 0 ? n : -EIO;
        done += (uint64_t)n;
    }
    return done == s->length ? 0 : -EIO;
}

/* The file opened again, checked to be the one the planner saw, and mapped. */
static inline __attribute__((always_inline)) bool map_file_into_place(const plan *p, const step *s)
{
    long fd = raw_syscall(SYS_openat, AT_FDCWD, (long)((const char *)p + s->path_at),
                          O_RDONLY | O_CLOEXEC, 0, 0, 0);
    if (fd < 0)
        return false;
    struct stat file;
    long rc = raw_syscall(SYS_fstat, fd, (long)&file, 0, 0, 0, 0);
    bool same = rc == 0 && (uint64_t)file.st_dev == s->device &&
                (uint64_t)file.st_ino == s->inode && (uint64_t)file.st_size == s->size;
    if (same)
        same = raw_syscall(SYS_mmap, (long)s->address, (long)s->length, s->prot,
                           (s->shared ? MAP_SHARED : MAP_PRIVATE) | MAP_FIXED, fd,
                           (long)s->file_offset) == (long)s->address;
    raw_syscall(SYS_close, fd, 0, 0, 0, 0, 0);
    return same;
}

static void __attribute__((noreturn, noinline, no_stack_protector)) execute_plan(plan *p)
{
    for (size_t i = 0; i < p->count; i++) {
        const step *s = &p->steps[i];
        long rc = 0, error = 0;
        switch (s->kind) {
        case STEP_BRK:
            rc = raw_syscall(SYS_brk, (long)s->address, 0, 0, 0, 0, 0) == (long)s->address ? 0 : -1;
            if (rc < 0)
                DIE_RAW("restore failed: the heap could not be set to the image's size\n");
            break;
        case STEP_UNMAP:
            rc = error = raw_syscall(SYS_munmap, (long)s->address, (long)s->length, 0, 0, 0, 0);
            break;
        case STEP_MAP_ANONYMOUS:
            rc = raw_syscall(SYS_mmap, (long)s->address, (long)s->length, s->prot,
                             MAP_PRIVATE | MAP_FIXED | MAP_ANONYMOUS, -1, 0);
            error = rc;
            rc = rc == (long)s->address ? 0 : -1;
            break;
        case STEP_MAP_IMAGE:
            rc = raw_syscall(SYS_mmap, (long)s->address, (long)s->length, s->prot,
                             MAP_PRIVATE | MAP_FIXED, p->image_fd, (long)s->file_offset);
            error = rc;
            rc = rc == (long)s->address ? 0 : -1;
            break;
        case STEP_COPY:
            rc = error = copy_into_place(p, s);
            break;
        case STEP_PROTECT:
            rc = error = raw_syscall(SYS_mprotect, (long)s->address, (long)s->length, s->prot, 0, 0, 0);
            break;
        case STEP_MAP_FILE:
            if (!map_file_into_place(p, s))
                DIE_RAW("restore failed: a file the image maps changed while it was restored\n");
            break;
        }
        if (rc < 0) /* memory is half the image's: nothing to go back to */
            die_at_step(i, s, error);
    }
    raw_syscall(SYS_arch_prctl, ARCH_SET_FS, (long)p->resume->fs_base, 0, 0, 0, 0);
    raw_syscall(SYS_close, p->image_fd, 0, 0, 0, 0, 0);
    context_resume(&p->resume->context, (uint64_t)(uintptr_t)p);
}

/* Waits for the planner's word, up to PLANNER_WAIT_MS; a planner that died without one (killed)
   is noticed within PLANNER_POLL_MS. */
static bool planner_planned(plan *p, long planner)
{
    struct timespec poll = {.tv_nsec = PLANNER_POLL_MS * 1000000L};
    for (int waited = 0; waited < PLANNER_WAIT_MS / PLANNER_POLL_MS; waited++) {
        int state = __atomic_load_n(&p->planner_state, __ATOMIC_ACQUIRE);
        if (state != PLANNER_WORKING)
            return state == PLANNER_PLANNED;
        raw_syscall(SYS_futex, (long)&p->planner_state, FUTEX_WAIT, PLANNER_WORKING, (long)&poll,
                    0, 0);
        if (raw_syscall(SYS_kill, planner, 0, 0, 0, 0, 0) == -ESRCH) /* gone, pid 1 reaped it */
            return __atomic_load_n(&p->planner_state, __ATOMIC_ACQUIRE) == PLANNER_PLANNED;
    }
    return false;
}

static void __attribute__((noreturn)) run_on_scratch_stack(plan *p)
{
    char *top = (char *)p + p->header.length; /* 16-byte aligned: a page boundary */
    __asm__ volatile("movq %0, %%rsp\n\t"
                     "xorl %%ebp, %%ebp\n\t"
                     "call *%1\n\t"
                     "ud2"
                     :
                     : "r"(top), "r"(execute_plan), "D"(p)
                     : "memory");
    __builtin_unreachable();
}
#endif

/* A shared mapping the planner writes and this process reads: placed before the planner looks
   at /proc/self/maps, so it is in the plan's view (and never unmapped by it). */
static plan *map_scratch(void)
{
    for (int i = 0; i < SCRATCH_SEARCH_TRIES; i++) {
        void *at = (void *)(uintptr_t)(SCRATCH_SEARCH_FROM + (uint64_t)i * SCRATCH_SEARCH_STEP);
        void *scratch = mmap(at, SCRATCH_SIZE, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
        if (scratch != MAP_FAILED)
            return scratch;
    }
    return NULL;
}

void restorer_run(int image_fd)
{
#if !CONTEXT_SWITCH_SUPPORTED
    (void)image_fd, (void)map_scratch, (void)make_plan;
    dprintf(2, "restore failed: process images are supported on x86_64 only\n");
    _exit(RESTORER_FAILED_STATUS);
#else
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL); /* the checkpoint point puts the saved mask back */
    plan *p = map_scratch();
    if (!p)
        DIE_RAW("restore failed: no room for the restorer's scratch memory\n");
    p->header.length = SCRATCH_SIZE;
    /* The planner is pid 1's child (CLONE_PARENT: pid 1 reaps whatever ends), and this process
       waits for its word in the scratch, not for its exit: its address space, a copy of this
       one, is torn down meanwhile (~3.5 ms here). */
    p->planner_state = PLANNER_WORKING;
    long planner = raw_syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0, 0);
    if (planner == 0) {
        scratch_plan = p; /* the child's own copy of this static */
        make_plan(image_fd);
    }
    if (planner < 0 || !planner_planned(p, planner)) {
        size_t length = 0;
        while (length < sizeof p->why - 1 && p->why[length])
            length++;
        raw_syscall(SYS_write, 2, (long)"restore failed: ", 16, 0, 0, 0);
        if (length == 0)
            raw_syscall(SYS_write, 2, (long)"the planner did not finish", 26, 0, 0, 0);
        raw_syscall(SYS_write, 2, (long)p->why, (long)length, 0, 0, 0);
        raw_syscall(SYS_write, 2, (long)"\n", 1, 0, 0, 0);
        raw_syscall(SYS_exit_group, RESTORER_FAILED_STATUS, 0, 0, 0, 0, 0);
    }
    p->image_fd = image_fd;
    p->resume = checkpoint_point_resume();
    run_on_scratch_stack(p);
#endif
}
