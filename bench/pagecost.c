/* pagecost — what this host charges for the page-table work a new kernel does, so that the
 * start-up figures of `make bench` can be read against the machine they came from.
 *
 * A parent writes 100 MiB of private memory and forks; the child (a new kernel, in miniature)
 * then pays, per 4 KiB page: a copy-on-write fault (writing a page it shares with the parent),
 * a first read of a shared page (free on bare metal and hardware-assisted paging; a trap where
 * the hypervisor shadows page tables), one MADV_POPULATE_WRITE pass (how a cellbox kernel
 * copies its hot pages ahead), and the same pass over a private file mapping not yet mapped (a
 * copy without the TLB flush of a copy-on-write). Then two children at once, each reading pages
 * for the first time, on two CPUs: where the hypervisor handles such traps under one lock, each
 * pays more than alone, and a new kernel's start gains nothing from a second CPU. Prints one
 * JSON object: medians over 5 forks, in microseconds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

enum { RUNS = 5, PAGES_TOUCHED = 1600, PAGE = 4096 };
enum { FORK, COW_FAULT, FIRST_READ, POPULATE, POPULATE_FILE, FIGURES };

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Reads one byte of each of PAGES_TOUCHED pages (every third, from the second): the first-read
   pattern, the same in every measurement. Returns their sum, so the reads are not dropped. */
static char read_pages(volatile char *memory, size_t pages)
{
    char sum = 0;
    for (size_t i = 0; i < PAGES_TOUCHED; i++)
        sum = (char)(sum + memory[(i * 3 + 1) % pages * PAGE]);
    return sum;
}

/* The child's measurements, written to `report`. Pages are spread (every third) so that no
   two measurements touch the same page and readahead-like batching cannot help. */
static void measure_in_child(volatile char *memory, size_t pages, int snapshot, double forked_at,
                             int report)
{
    double figures[FIGURES], start = now_us();
    figures[FORK] = start - forked_at;
    for (size_t i = 0; i < PAGES_TOUCHED; i++)
        memory[(i * 3) % pages * PAGE] = 2;
    double written = now_us();
    char sum = read_pages(memory, pages);
    double read = now_us();
    int rc = madvise((char *)memory + (PAGES_TOUCHED * 3 + 8) * (size_t)PAGE,
                     PAGES_TOUCHED * (size_t)PAGE, MADV_POPULATE_WRITE);
    double populated = now_us();
    figures[COW_FAULT] = (written - start) / PAGES_TOUCHED;
    figures[FIRST_READ] = (read - written) / PAGES_TOUCHED;
    figures[POPULATE] =
        rc == 0 ? (populated - read) / PAGES_TOUCHED : -1; /* -1: before Linux 5.14 */
    /* The same pass over a private mapping of a file (a memfd the parent filled) that this
       process has not mapped before: each page is copied from the page cache into a PTE that
       was empty, so no TLB entry has to be flushed. */
    size_t length = PAGES_TOUCHED * (size_t)PAGE;
    char *copy = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE, snapshot, 0);
    rc = copy == MAP_FAILED ? -1 : madvise(copy, length, MADV_POPULATE_WRITE);
    figures[POPULATE_FILE] = rc == 0 ? (now_us() - populated) / PAGES_TOUCHED : -1;
    ssize_t n = write(report, figures, sizeof figures);
    _exit(n == (ssize_t)sizeof figures && sum != 42 ? 0 : 1);
}

/* Two children forked together, released at once: each reads PAGES_TOUCHED pages it has not
   touched and reports its time per page. The mean of the two. */
static int first_read_two_at_once(volatile char *memory, size_t pages, const int report[2],
                                  double *mean)
{
    int gate[2];
    if (pipe(gate) < 0)
        return -1;
    for (int c = 0; c < 2; c++) {
        pid_t child = fork();
        if (child < 0)
            return -1;
        if (child == 0) {
            char go;
            if (read(gate[0], &go, 1) != 1)
                _exit(1);
            double start = now_us();
            char sum = read_pages(memory, pages);
            double per_page = (now_us() - start) / PAGES_TOUCHED;
            ssize_t n = write(report[1], &per_page, sizeof per_page);
            _exit(n == (ssize_t)sizeof per_page && sum != 42 ? 0 : 1);
        }
    }
    usleep(100000); /* both children forked and waiting at the gate */
    int released = write(gate[1], "gg", 2) == 2 ? 0 : -1;
    close(gate[0]);
    close(gate[1]);
    double total = 0;
    for (int c = 0; c < 2; c++) {
        double per_page;
        if (wait(NULL) < 0 || read(report[0], &per_page, sizeof per_page) != sizeof per_page)
            return -1;
        total += per_page;
    }
    *mean = total / 2;
    return released;
}

int main(void)
{
    size_t size = (size_t)100 << 20, pages = size / PAGE;
    char *memory = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int report[2], snapshot = memfd_create("pagecost", MFD_CLOEXEC);
    if (memory == MAP_FAILED || pipe(report) < 0 || snapshot < 0 ||
        ftruncate(snapshot, PAGES_TOUCHED * (off_t)PAGE) < 0) {
        perror("pagecost");
        return 1;
    }
    madvise(memory, size, MADV_NOHUGEPAGE); /* 4 KiB pages, as a kernel's heap mostly is */
    memset(memory, 1, size);
    char page[PAGE];
    memset(page, 1, sizeof page);
    for (int i = 0; i < PAGES_TOUCHED; i++)
        if (write(snapshot, page, sizeof page) != (ssize_t)sizeof page) {
            perror("pagecost");
            return 1;
        }
    double samples[FIGURES][RUNS];
    for (int run = 0; run < RUNS; run++) {
        double forked_at = now_us();
        pid_t child = fork();
        if (child == 0)
            measure_in_child(memory, pages, snapshot, forked_at, report[1]);
        double figures[FIGURES];
        if (child < 0 || waitpid(child, NULL, 0) < 0 ||
            read(report[0], figures, sizeof figures) != sizeof figures) {
            fprintf(stderr, "pagecost: a measuring child failed\n");
            return 1;
        }
        for (int f = 0; f < FIGURES; f++)
            samples[f][run] = figures[f];
    }
    double together[RUNS];
    for (int run = 0; run < RUNS; run++)
        if (first_read_two_at_once(memory, pages, report, &together[run]) < 0) {
            fprintf(stderr, "pagecost: the two measuring children failed\n");
            return 1;
        }
    qsort(together, RUNS, sizeof together[0], by_value);
    for (int f = 0; f < FIGURES; f++)
        qsort(samples[f], RUNS, sizeof samples[f][0], by_value);
    printf("{\"fork_to_child_us\": %.1f, \"cow_fault_us\": %.2f, \"first_read_us\": %.2f, "
           "\"populate_write_us\": %.2f, \"populate_write_unmapped_file_us\": %.2f, "
           "\"first_read_two_processes_at_once_us\": %.2f}\n",
           samples[FORK][RUNS / 2], samples[COW_FAULT][RUNS / 2], samples[FIRST_READ][RUNS / 2],
           samples[POPULATE][RUNS / 2], samples[POPULATE_FILE][RUNS / 2], together[RUNS / 2]);
    return 0;
}
