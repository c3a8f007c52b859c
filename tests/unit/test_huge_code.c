/* huge_code: the windows of a library's read-only segments a forked child ran are found (and no
   others), and moving them onto huge pages keeps every byte, keeps the code callable and shares
   the huge page with a later fork. On transparent huge pages a child that writes the code gets
   a private copy; on pages of the hugetlb pool (reserved here for the test, then given back) it
   cannot make the code writable at all. Each kind is tried in a child process of its own (a
   library moves once). The library is Debian's libpython (what the zygote moves), loaded here
   without starting it. */
#include "runtime/huge_code.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define LIBPYTHON "libpython3.11.so.1.0"

static const char *(*py_get_version)(void);
static uintptr_t library_start, library_end; /* libpython's loaded image */

static int find_library(struct dl_phdr_info *object, size_t size, void *data)
{
    (void)size;
    (void)data;
    if (!strstr(object->dlpi_name, LIBPYTHON))
        return 0;
    for (int i = 0; i < object->dlpi_phnum; i++) {
        const ElfW(Phdr) *segment = &object->dlpi_phdr[i];
        uintptr_t start = object->dlpi_addr + segment->p_vaddr;
        if (segment->p_type != PT_LOAD)
            continue;
        if (!library_start || start < library_start)
            library_start = start;
        if (start + segment->p_memsz > library_end)
            library_end = start + segment->p_memsz;
    }
    return 1;
}

/* A child like the zygote's probe: touches one byte of every page in [from, to), then waits. */
static pid_t touching_child(uintptr_t from, uintptr_t to)
{
    int ready[2];
    if (pipe(ready) < 0)
        return -1;
    pid_t child = fork();
    if (child == 0) {
        volatile unsigned char sum = 0;
        for (uintptr_t page = from; page < to; page += 4096)
            sum += *(const volatile unsigned char *)page;
        (void)sum;
        if (write(ready[1], "x", 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char byte;
    if (child < 0 || read(ready[0], &byte, 1) != 1)
        child = -1;
    close(ready[0]);
    close(ready[1]);
    return child;
}

static void end_child(pid_t child)
{
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
}

/* What smaps says of the mapping holding `address`. */
typedef struct mapping {
    char permissions[8];
    char name[64];      /* empty for anonymous memory */
    long anon_huge_kib; /* transparent huge pages */
    long hugetlb_kib;   /* pages of the hugetlb pool, shared or private */
} mapping;

static bool mapping_of(uintptr_t address, mapping *out)
{
    FILE *smaps = fopen("/proc/self/smaps", "re");
    if (!smaps)
        return false;
    memset(out, 0, sizeof *out);
    char line[4096];
    bool inside = false, found = false;
    while (fgets(line, sizeof line, smaps)) {
        unsigned long start, end;
        char these[8];
        int name_at = 0;
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &start, &end, these, &name_at) >= 3) {
            if (found)
                break;
            inside = start <= address && address < end;
            if (inside) {
                memcpy(out->permissions, these, sizeof these);
                if (name_at > 0)
                    sscanf(line + name_at, "%63s", out->name);
            }
            continue;
        }
        long kib;
        if (inside && sscanf(line, "AnonHugePages: %ld kB", &kib) == 1)
            out->anon_huge_kib = kib, found = true;
        if (inside && (sscanf(line, "Shared_Hugetlb: %ld kB", &kib) == 1 ||
                       sscanf(line, "Private_Hugetlb: %ld kB", &kib) == 1))
            out->hugetlb_kib += kib;
    }
    fclose(smaps);
    return found;
}

static bool on_pool_page(const mapping *m)
{
    return strncmp(m->name, "/memfd:cellbox-huge-code", 24) == 0 && m->permissions[3] == 's';
}

static void test_learns_only_the_windows_the_child_ran(void)
{
    huge_code all, none, one;
    pid_t child = touching_child(library_start, library_end);
    CHECK(child > 0);
    CHECK(huge_code_learn(child, HUGE_CODE_MIN_PAGES, &all) == 0);
    /* More pages than a window has: none qualifies. */
    CHECK(huge_code_learn(child, HUGE_CODE_PAGE_SIZE / 4096 + 1, &none) == 0);
    end_child(child);
    /* libpython's read-only segments are ~6 MiB: wherever it is loaded, at least one aligned
       window lies inside them; none outside the library (not ours, not the C library). */
    CHECK(all.count >= 1);
    CHECK(none.count == 0);
    for (size_t i = 0; i < all.count; i++) {
        CHECK(all.windows[i].start % HUGE_CODE_PAGE_SIZE == 0);
        CHECK(all.windows[i].start >= library_start &&
              all.windows[i].start + HUGE_CODE_PAGE_SIZE <= library_end);
        CHECK(all.windows[i].probe_pages == HUGE_CODE_PAGE_SIZE / 4096);
        CHECK(all.windows[i].protection & PROT_READ);
    }
    if (all.count == 0)
        return;
    /* A child that ran one window only: that one is learned, and nothing else. */
    uintptr_t chosen = all.windows[all.count - 1].start;
    child = touching_child(chosen, chosen + HUGE_CODE_PAGE_SIZE);
    CHECK(huge_code_learn(child, HUGE_CODE_MIN_PAGES, &one) == 0);
    end_child(child);
    CHECK(one.count == 1 && one.windows[0].start == chosen);
}

static bool use_pool; /* which kind of huge page this process moves the code onto */

static void test_moved_windows_keep_their_bytes_and_run(void)
{
    huge_code code;
    pid_t child = touching_child(library_start, library_end);
    CHECK(huge_code_learn(child, HUGE_CODE_MIN_PAGES, &code) == 0);
    end_child(child);
    if (code.count == 0)
        return;
    unsigned char *before = malloc(code.count * HUGE_CODE_PAGE_SIZE);
    for (size_t i = 0; i < code.count; i++)
        memcpy(before + i * HUGE_CODE_PAGE_SIZE, (const void *)code.windows[i].start,
               HUGE_CODE_PAGE_SIZE);
    char why[256];
    size_t from_pool = 0;
    size_t moved = huge_code_move(&code, use_pool, &from_pool, why, sizeof why);
    if (moved == 0 && strstr(why, "MADV_COLLAPSE")) {
        printf("# skipped: this host gives no huge pages (%s)\n", why);
        free(before);
        return;
    }
    CHECK(moved == code.count);
    CHECK(from_pool == (use_pool ? code.count : 0));
    CHECK(why[0] == '\0');
    for (size_t i = 0; i < code.count; i++) {
        const huge_window *window = &code.windows[i];
        CHECK(memcmp(before + i * HUGE_CODE_PAGE_SIZE, (const void *)window->start,
                     HUGE_CODE_PAGE_SIZE) == 0);
        mapping m;
        CHECK(mapping_of(window->start, &m));
        if (use_pool) {
            CHECK(on_pool_page(&m)); /* the sealed memfd, shared */
            CHECK(m.hugetlb_kib >= 2048);
        } else {
            CHECK(m.name[0] == '\0'); /* anonymous now */
            CHECK(m.anon_huge_kib >= 2048);
        }
        CHECK(m.permissions[0] == 'r' && m.permissions[1] == '-');
        CHECK((m.permissions[2] == 'x') == ((window->protection & PROT_EXEC) != 0));
    }
    free(before);
    /* The code still runs, wherever in the library it is. */
    CHECK(strncmp(py_get_version(), "3.11", 4) == 0);
}

/* After the move: a fork shares the huge page. A child that tries to write it gets its own copy
   of a transparent page, and cannot make a pool page writable at all. */
static void test_a_child_shares_the_huge_page_and_writes_only_its_own(void)
{
    mapping m;
    if (!mapping_of(library_start, &m) || (m.anon_huge_kib < 2048 && m.hugetlb_kib < 2048))
        return; /* the library's first window was not moved (skipped above, or not aligned) */
    unsigned char *header = (unsigned char *)library_start;
    CHECK(memcmp(header, "\177ELF", 4) == 0);
    pid_t child = fork();
    if (child == 0) {
        mapping seen;
        bool shared = mapping_of(library_start, &seen) && memcmp(header, "\177ELF", 4) == 0 &&
                      (use_pool ? on_pool_page(&seen) : seen.anon_huge_kib >= 2048);
        bool writable = mprotect(header, 4096, PROT_READ | PROT_WRITE) == 0;
        if (writable)
            header[1] = 'X';
        bool as_expected = use_pool ? !writable && errno == EACCES : writable && header[1] == 'X';
        _exit(shared && as_expected ? 0 : 1);
    }
    int status = -1;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(memcmp(header, "\177ELF", 4) == 0); /* the parent's page never changed */
    CHECK(mapping_of(library_start, &m) && (use_pool ? on_pool_page(&m) : m.anon_huge_kib >= 2048));
}

/* Runs the moving tests in a child process that moves the code onto `pool` pages or transparent
   ones; true if they passed. */
static bool moving_tests_pass(bool pool)
{
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        use_pool = pool;
        printf("# moving onto %s huge pages\n", pool ? "hugetlb pool" : "transparent");
        RUN(test_moved_windows_keep_their_bytes_and_run);
        RUN(test_a_child_shares_the_huge_page_and_writes_only_its_own);
        fflush(stdout);
        _exit(check_failed ? 1 : 0);
    }
    int status = -1;
    waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

#define NR_HUGEPAGES "/proc/sys/vm/nr_hugepages"

static long read_number(const char *path)
{
    FILE *file = fopen(path, "re");
    long value = -1;
    if (file && fscanf(file, "%ld", &value) != 1)
        value = -1;
    if (file)
        fclose(file);
    return value;
}

static bool write_number(const char *path, long value)
{
    FILE *file = fopen(path, "we");
    if (!file)
        return false;
    bool written = fprintf(file, "%ld\n", value) > 0;
    return fclose(file) == 0 && written;
}

/* Pool pages for every window libpython could have (it spans ~6 MiB of read-only segments), on
   top of what the host has reserved; given back after. */
#define POOL_PAGES_FOR_TEST 8

static void test_both_kinds_of_huge_page(void)
{
    CHECK(moving_tests_pass(false));
    long reserved = read_number(NR_HUGEPAGES);
    if (reserved < 0 || !write_number(NR_HUGEPAGES, reserved + POOL_PAGES_FOR_TEST) ||
        read_number(NR_HUGEPAGES) < reserved + POOL_PAGES_FOR_TEST) {
        printf("# skipped the hugetlb pool: cannot reserve %d pages in %s\n", POOL_PAGES_FOR_TEST,
               NR_HUGEPAGES);
        if (reserved >= 0)
            write_number(NR_HUGEPAGES, reserved);
        return;
    }
    CHECK(moving_tests_pass(true));
    CHECK(write_number(NR_HUGEPAGES, reserved));
}

int main(void)
{
    void *library = dlopen(LIBPYTHON, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        printf("not ok - cannot load %s: %s\n", LIBPYTHON, dlerror());
        return 1;
    }
    *(void **)&py_get_version = dlsym(library, "Py_GetVersion");
    dl_iterate_phdr(find_library, NULL);
    CHECK(py_get_version != NULL && library_end > library_start);
    RUN(test_learns_only_the_windows_the_child_ran);
    RUN(test_both_kinds_of_huge_page);
    return check_summary("huge_code");
}
