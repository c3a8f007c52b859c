/* hot_pages: the pages a forked child copied are found, and a later child copies exactly those
   ahead (each is then its own: "exclusively mapped" in /proc/self/pagemap). */
#include "runtime/hot_pages.h"

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define REGION_PAGES 64

static size_t page_size;
static unsigned char *region;
static const int written[] = {3, 4, 10}; /* what the probe child writes */

static bool is_written(int page)
{
    for (size_t i = 0; i < sizeof written / sizeof written[0]; i++)
        if (written[i] == page)
            return true;
    return false;
}

static bool set_holds(const hot_pages *set, int page)
{
    uintptr_t address = (uintptr_t)(region + (size_t)page * page_size);
    for (size_t i = 0; i < set->count; i++)
        if (address >= set->ranges[i].start && address < set->ranges[i].start + set->ranges[i].length)
            return true;
    return false;
}

static bool exclusively_mine(int page)
{
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    uint64_t entry = 0;
    off_t offset = (off_t)((uintptr_t)(region + (size_t)page * page_size) / page_size * sizeof entry);
    bool ok = fd >= 0 && pread(fd, &entry, sizeof entry, offset) == (ssize_t)sizeof entry;
    if (fd >= 0)
        close(fd);
    return ok && (entry & (1ull << 63)) && (entry & (1ull << 56));
}

static void test_learns_the_pages_a_child_copied_and_copies_them_ahead(void)
{
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t probe = fork();
    if (probe == 0) {
        for (size_t i = 0; i < sizeof written / sizeof written[0]; i++)
            region[(size_t)written[i] * page_size] = 2;
        if (write(ready[1], "x", 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char byte;
    CHECK(read(ready[0], &byte, 1) == 1);
    hot_pages set;
    CHECK(hot_pages_learn(probe, &set) == 0);
    kill(probe, SIGKILL);
    waitpid(probe, NULL, 0);
    for (int page = 0; page < REGION_PAGES; page++)
        if (set_holds(&set, page) != is_written(page))
            CHECK(!"the learned set holds exactly the pages the probe wrote");
    CHECK(set.pages >= 3 && set.pages <= HOT_PAGES_MAX);

    /* A later child copies them in bulk, before writing anything. */
    pid_t child = fork();
    if (child == 0) {
        size_t copied = hot_pages_copy(&set);
        bool ok = copied == set.pages;
        for (int page = 0; page < REGION_PAGES; page++)
            ok = ok && exclusively_mine(page) == is_written(page);
        _exit(ok ? 0 : 1);
    }
    int status = -1;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    hot_pages_free(&set);
    CHECK(set.ranges == NULL && set.count == 0);
}

static void test_a_probe_that_is_gone_gives_an_empty_set(void)
{
    pid_t gone = fork();
    if (gone == 0)
        _exit(0);
    waitpid(gone, NULL, 0);
    hot_pages set;
    CHECK(hot_pages_learn(gone, &set) < 0);
    CHECK(set.count == 0 && set.pages == 0);
    CHECK(hot_pages_copy(&set) == 0);
}

int main(void)
{
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    region = mmap(NULL, REGION_PAGES * page_size, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED)
        return 1;
    madvise(region, REGION_PAGES * page_size, MADV_NOHUGEPAGE); /* 4 KiB pages, as counted */
    memset(region, 1, REGION_PAGES * page_size);                 /* present before the forks */
    RUN(test_learns_the_pages_a_child_copied_and_copies_them_ahead);
    RUN(test_a_probe_that_is_gone_gives_an_empty_set);
    return check_summary("hot_pages");
}
