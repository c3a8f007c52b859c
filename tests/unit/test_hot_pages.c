/* hot_pages: the pages a forked child copied are found, and a later child copies exactly those
   ahead (each is then its own: "exclusively mapped" in /proc/self/pagemap); pinned, they are
   copied by the fork itself. */
#include "runtime/hot_pages.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
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

/* The set the probe above learns, built by hand: pages 3-4 and 10. */
static hot_pages written_set(hot_range ranges[2])
{
    ranges[0] = (hot_range){.start = (uintptr_t)(region + 3 * page_size), .length = 2 * page_size};
    ranges[1] = (hot_range){.start = (uintptr_t)(region + 10 * page_size), .length = page_size};
    return (hot_pages){.ranges = ranges, .count = 2, .pages = 3};
}

static void test_pinned_pages_are_copied_by_the_fork_itself(void)
{
    hot_range ranges[2];
    hot_pages set = written_set(ranges);
    int ring = hot_pages_pin(&set);
    if (ring < 0 && (errno == ENOSYS || errno == EPERM)) {
        printf("# skipped: this host does not let us use io_uring (%s); kernels copy their "
               "pages themselves there\n", strerror(errno));
        return;
    }
    CHECK(ring >= 0);
    CHECK((fcntl(ring, F_GETFD) & FD_CLOEXEC) != 0); /* never inherited across an exec */
    int checked[2], result[2];
    CHECK(pipe(checked) == 0 && pipe(result) == 0);
    pid_t child = fork();
    if (child == 0) {
        /* Nothing written, nothing populated: the pinned pages are ours already, the rest shared. */
        bool ok = true;
        for (int page = 0; page < REGION_PAGES; page++)
            ok = ok && exclusively_mine(page) == is_written(page);
        char byte = ok ? 'y' : 'n';
        if (write(result[1], &byte, 1) != 1)
            _exit(1);
        char go;
        _exit(read(checked[0], &go, 1) == 1 ? 0 : 1); /* shares the rest until the parent looked */
    }
    char byte = 0;
    CHECK(read(result[0], &byte, 1) == 1 && byte == 'y');
    /* The parent keeps its pinned pages (writing them costs it no copy); the rest it shares. */
    for (int page = 0; page < REGION_PAGES; page++)
        if (exclusively_mine(page) != is_written(page))
            CHECK(!"the parent holds its pinned pages alone and shares the others");
    CHECK(write(checked[1], "x", 1) == 1);
    int status = -1;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (int i = 0; i < 2; i++) {
        close(checked[i]);
        close(result[i]);
    }
    close(ring); /* unpins */
}

static void test_a_stacks_top_is_added_up_to_its_mappings_end(void)
{
    char here;
    uintptr_t page = (uintptr_t)&here & ~(uintptr_t)(page_size - 1);
    hot_pages set = {0};
    CHECK(hot_pages_add_stack_top(&set, (uintptr_t)&here, 4 * page_size) == 0);
    CHECK(set.count == 1);
    uintptr_t start = set.ranges[0].start, end = start + set.ranges[0].length;
    CHECK(start <= page - 4 * page_size && start >= page - 4 * page_size); /* 4 pages below */
    CHECK(end > page);                        /* up to the mapping's end, above this frame */
    FILE *maps = fopen("/proc/self/maps", "re");
    char line[512];
    bool ends_a_mapping = false;
    while (maps && fgets(line, sizeof line, maps)) {
        unsigned long low, high;
        if (sscanf(line, "%lx-%lx", &low, &high) == 2 && high == end && low <= page)
            ends_a_mapping = true;
    }
    if (maps)
        fclose(maps);
    CHECK(ends_a_mapping);
    CHECK(set.pages == (end - start) / page_size);
    /* The bottom is the mapping's start when there is less below. */
    hot_pages region_set = {0};
    CHECK(hot_pages_add_stack_top(&region_set, (uintptr_t)region + page_size, 16 * page_size) == 0);
    CHECK(region_set.count == 1 && region_set.ranges[0].start == (uintptr_t)region);
    hot_pages_free(&region_set);
    hot_pages_free(&set);
    errno = 0;
    hot_pages none = {0};
    CHECK(hot_pages_add_stack_top(&none, 16, 0) < 0 && errno == ENOENT && none.count == 0);
}

/* A library's pthread_atfork handlers (OpenBLAS has one) write the forking process's pages. */
static bool handlers_on;
static void prepare_handler(void)
{
    if (handlers_on)
        region[40 * page_size]++;
}
static void parent_handler(void)
{
    if (handlers_on)
        region[41 * page_size]++;
}

static void test_the_pages_a_forks_handlers_write_in_the_parent_are_added(void)
{
    CHECK(pthread_atfork(prepare_handler, parent_handler, NULL) == 0);
    hot_pages added = {0};
    handlers_on = true;
    CHECK(hot_pages_add_written_by_fork(&added) == 0);
    handlers_on = false;
    CHECK(set_holds(&added, 40));
    CHECK(set_holds(&added, 41));
    CHECK(!set_holds(&added, 50)); /* present, untouched */
    /* What the set holds already is not added twice. */
    handlers_on = true;
    CHECK(hot_pages_add_written_by_fork(&added) == 0);
    handlers_on = false;
    size_t twice = 0;
    for (size_t i = 0; i < added.count; i++)
        twice += set_holds(&(hot_pages){.ranges = &added.ranges[i], .count = 1}, 40);
    CHECK(twice == 1);
    hot_pages_free(&added);
}

static void test_an_empty_set_is_not_pinned(void)
{
    hot_pages empty = {0};
    errno = 0;
    CHECK(hot_pages_pin(&empty) < 0 && errno == E2BIG);
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
    RUN(test_pinned_pages_are_copied_by_the_fork_itself);
    RUN(test_a_stacks_top_is_added_up_to_its_mappings_end);
    RUN(test_an_empty_set_is_not_pinned);
    RUN(test_the_pages_a_forks_handlers_write_in_the_parent_are_added);
    return check_summary("hot_pages");
}
