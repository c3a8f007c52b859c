/* huge_code: the windows of a library's read-only segments a forked child ran are found (and no
   others), and moving them onto huge pages keeps every byte, keeps the code callable, shares
   the huge page with a later fork, and leaves the page private to a child that writes it.
   The library is Debian's libpython (what the zygote moves), loaded here without starting it. */
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

/* The smaps fields of the mapping holding `address`: its permissions and its AnonHugePages. */
static bool mapping_of(uintptr_t address, char permissions[8], long *huge_kib, bool *named)
{
    FILE *smaps = fopen("/proc/self/smaps", "re");
    if (!smaps)
        return false;
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
                memcpy(permissions, these, sizeof these);
                *named = name_at > 0 && line[name_at] == '/';
            }
            continue;
        }
        if (inside && sscanf(line, "AnonHugePages: %ld kB", huge_kib) == 1)
            found = true;
    }
    fclose(smaps);
    return found;
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
    size_t moved = huge_code_move(&code, why, sizeof why);
    if (moved == 0 && strstr(why, "MADV_COLLAPSE")) {
        printf("# skipped: this host gives no huge pages (%s)\n", why);
        free(before);
        return;
    }
    CHECK(moved == code.count);
    CHECK(why[0] == '\0');
    for (size_t i = 0; i < code.count; i++) {
        const huge_window *window = &code.windows[i];
        CHECK(memcmp(before + i * HUGE_CODE_PAGE_SIZE, (const void *)window->start,
                     HUGE_CODE_PAGE_SIZE) == 0);
        char permissions[8] = "";
        long huge_kib = -1;
        bool named = true;
        CHECK(mapping_of(window->start, permissions, &huge_kib, &named));
        CHECK(huge_kib >= 2048);
        CHECK(!named); /* anonymous now */
        CHECK(permissions[0] == 'r' && permissions[1] == '-');
        CHECK((permissions[2] == 'x') == ((window->protection & PROT_EXEC) != 0));
    }
    free(before);
    /* The code still runs, wherever in the library it is. */
    CHECK(strncmp(py_get_version(), "3.11", 4) == 0);
}

/* After the move: a fork shares the huge page; a child that writes it gets its own copy. */
static void test_a_child_shares_the_huge_page_and_writes_only_its_own(void)
{
    char permissions[8] = "";
    long huge_kib = 0;
    bool named = true;
    if (!mapping_of(library_start, permissions, &huge_kib, &named) || huge_kib < 2048)
        return; /* the library's first window was not moved (skipped above, or not aligned) */
    unsigned char *header = (unsigned char *)library_start;
    CHECK(memcmp(header, "\177ELF", 4) == 0);
    pid_t child = fork();
    if (child == 0) {
        bool shared = mapping_of(library_start, permissions, &huge_kib, &named) &&
                      huge_kib >= 2048 && memcmp(header, "\177ELF", 4) == 0;
        bool written = mprotect(header, 4096, PROT_READ | PROT_WRITE) == 0;
        if (written)
            header[1] = 'X';
        _exit(shared && written && header[1] == 'X' ? 0 : 1);
    }
    int status = -1;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(memcmp(header, "\177ELF", 4) == 0); /* the parent's page never changed */
    CHECK(mapping_of(library_start, permissions, &huge_kib, &named) && huge_kib >= 2048);
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
    RUN(test_moved_windows_keep_their_bytes_and_run);
    RUN(test_a_child_shares_the_huge_page_and_writes_only_its_own);
    return check_summary("huge_code");
}
