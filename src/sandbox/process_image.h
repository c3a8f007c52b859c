/* process_image — a stopped, single-threaded process's private memory as a file, and that file
 * read back: the format a checkpoint's memory is kept in (docs/checkpoint-format.md).
 *
 * An image is a header (magic, version, a JSON description: the zygote generation it was taken
 * against, brk, every mapping of the process with its address, protection, flags and backing
 * file, and for each mapping the runs of pages it holds and where in the file they are) and
 * then the page data, page-aligned, so that a restore can map runs straight from the file
 * (MAP_PRIVATE: copy-on-write, pages read only when touched) instead of copying them.
 *
 * Verbs: process_image_capture (daemon: /proc/PID/maps, pagemap and process_vm_readv, while the
 * process waits at its checkpoint point), process_image_read_header / process_image_free (both
 * sides: the parsed description), process_image_fits (are this process's file mappings the
 * image's: same files, same addresses). */
#ifndef CELLBOX_SANDBOX_PROCESS_IMAGE_H
#define CELLBOX_SANDBOX_PROCESS_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct process_image process_image; /* the parsed header */

typedef struct process_image_stats {
    size_t mappings;
    long long pages;       /* pages written into the image */
    long long bytes;       /* their bytes */
} process_image_stats;

/* Captures `pid`'s memory into out_fd from offset 0. base_pid > 0: leave out every page that is
   the same physical page as base_pid's (the live zygote) at the same address, and record
   `generation` (an id of that zygote process, e.g. "pid:starttime") as the base the image needs;
   base_pid 0: a full image (every private page). 0, or -errno with `why` (ENOSPC from a full
   disk is returned as such; EBUSY for a writable MAP_SHARED mapping, memory a copy would share
   or lose: `why` names it and says to close it; nothing of the process is changed by a failed
   capture). */
int process_image_capture(pid_t pid, pid_t base_pid, const char *generation, int out_fd,
                          process_image_stats *stats, char *why, size_t why_size);

/* The same, refused (-EFBIG, `why` saying so) once the page data would pass max_bytes (> 0):
   mapped files count whole, and a process may map far more than its memory limit. */
int process_image_capture_at_most(pid_t pid, pid_t base_pid, const char *generation, int out_fd,
                                  long long max_bytes, process_image_stats *stats, char *why,
                                  size_t why_size);

/* Reads and checks the header of the image in fd (magic, version, sizes within the file,
   mappings sorted and not overlapping, runs inside their mappings and the file). NULL with `why`
   for anything malformed: an image is only ever the daemon's own file, but a damaged one must
   fail cleanly, never map something half-read. */
process_image *process_image_read_header(int fd, char *why, size_t why_size);

/* Waits until no one holds a write lock on the image in fd (an open-file-description lock: a
   fork's image is handed out while the daemon still writes it, sandbox/image_memory.h); at once
   for an image no one locks. 0, or -1 with errno. */
int process_image_wait_written(int fd);
void process_image_free(process_image *image);
const char *process_image_generation(const process_image *image); /* "" for a full image */
bool process_image_is_full(const process_image *image);

/* Would a process whose /proc/<pid>/maps is `maps_path` (the zygote's) hold the image's file
   mappings at the same addresses, from the same files (device, inode, size) at the same
   offsets? false with `why` naming the first difference. */
bool process_image_fits(const process_image *image, const char *maps_path, char *why,
                        size_t why_size);

/* The same for a full image, except that a read-only file mapping the process lacks there is
   no difference: the restorer maps that file itself (runtime/restorer.c), after checking it is
   the recorded one (device, inode, size). `executable` (the path the maps show for the process's
   program: the restorer's own code) and [vdso] must still be the same. A diff image: exactly
   process_image_fits. */
bool process_image_fits_mapping_files(const process_image *image, const char *maps_path,
                                      const char *executable, char *why, size_t why_size);

/* The parsed description, for the restorer (runtime/restorer.c) and the tests. */
typedef enum process_image_kind {
    PROCESS_IMAGE_DATA,    /* private memory the process wrote or owns: its pages are in the image */
    PROCESS_IMAGE_FILE,    /* a read-only file mapping: only recorded, must be the same at restore */
    PROCESS_IMAGE_SPECIAL, /* [vdso], [vvar], [vsyscall]: the kernel's, at the same address */
    PROCESS_IMAGE_STACK,   /* [stack]: its pages are copied into place, never remapped */
} process_image_kind;

typedef struct process_image_run {
    unsigned long long first_page; /* index of the first page in its mapping */
    unsigned long long pages;
    unsigned long long file_offset; /* of the data, from the image's start; page-aligned */
} process_image_run;

typedef struct process_image_mapping {
    unsigned long long start, end;
    int prot;                    /* PROT_READ | PROT_WRITE | PROT_EXEC */
    bool shared;
    unsigned long long offset;   /* in the backing file */
    unsigned long long inode;
    char dev[16];                /* "fe:00", as /proc/PID/maps says it */
    char path[256];
    unsigned long long file_size; /* a read-only file mapping's file size (0: not recorded) */
    process_image_kind kind;
    size_t run_count;
    process_image_run *runs;
} process_image_mapping;

/* Every mapping of a live process (maps_path: /proc/<pid>/maps), classified as an image would
   (runs empty); free() the array. NULL with `why`. */
process_image_mapping *process_image_maps(const char *maps_path, size_t *count, char *why,
                                          size_t why_size);

size_t process_image_mapping_count(const process_image *image);
const process_image_mapping *process_image_mapping_at(const process_image *image, size_t index);
unsigned long long process_image_brk(const process_image *image);
/* Are two file mappings the same file, place, offset and protection? */
bool process_image_same_file_mapping(const process_image_mapping *a,
                                     const process_image_mapping *b);

#endif
