#include "sandbox/uid_block.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "common/fs.h"

static int block_lock_fd = -1; /* open for the daemon's lifetime: the claim is the lock */

int uid_block_of(uid_t uid)
{
    if (uid < UID_BLOCK_BASE || uid >= UID_BLOCK_BASE + (uid_t)UID_BLOCK_SIZE * UID_BLOCK_COUNT)
        return -1;
    return (int)((uid - UID_BLOCK_BASE) / UID_BLOCK_SIZE);
}

static int read_recorded_block(const char *data_dir)
{
    char path[4200], text[32] = "";
    snprintf(path, sizeof path, "%.4000s/uid-block", data_dir);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    bool read = fgets(text, sizeof text, f) != NULL;
    fclose(f);
    char *end;
    long number = read ? strtol(text, &end, 10) : -1;
    return read && end != text && number >= 0 && number < UID_BLOCK_COUNT ? (int)number : -1;
}

/* Written whole or not at all: a daemon killed meanwhile leaves the previous record. */
static int record_block(const char *data_dir, int number)
{
    char path[4200], partial[4300];
    snprintf(path, sizeof path, "%.4000s/uid-block", data_dir);
    snprintf(partial, sizeof partial, "%s.partial", path);
    FILE *f = fopen(partial, "we");
    if (!f)
        return -1;
    fprintf(f, "%d\n", number);
    if (fclose(f) != 0 || rename(partial, path) < 0) {
        unlink(partial);
        return -1;
    }
    return 0;
}

/* Blocks under which some process on the host runs now (its real or effective uid), one flag
   each: a sandbox a dead daemon left running still owns its uid. */
static void mark_blocks_running(bool running[UID_BLOCK_COUNT])
{
    DIR *proc = opendir("/proc");
    if (!proc)
        return;
    for (struct dirent *entry; (entry = readdir(proc));) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9')
            continue;
        char path[300], line[256];
        snprintf(path, sizeof path, "/proc/%.200s/status", entry->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue; /* gone meanwhile */
        while (fgets(line, sizeof line, f)) {
            unsigned real, effective;
            if (sscanf(line, "Uid: %u %u", &real, &effective) != 2)
                continue;
            int a = uid_block_of((uid_t)real), b = uid_block_of((uid_t)effective);
            if (a >= 0)
                running[a] = true;
            if (b >= 0)
                running[b] = true;
            break;
        }
        fclose(f);
    }
    closedir(proc);
}

/* The lock of one block, held, or -1 (another daemon has it, or it cannot be opened). */
static int try_lock_block(int number, const char *data_dir)
{
    char path[200];
    snprintf(path, sizeof path, "%s/%d.lock", UID_BLOCK_LOCK_DIR, number);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -1;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        close(fd);
        return -1;
    }
    /* For a person reading the lock files: who holds the block. */
    char owner[4200];
    int length = snprintf(owner, sizeof owner, "%d %.4000s\n", (int)getpid(), data_dir);
    if (ftruncate(fd, 0) == 0 && pwrite(fd, owner, (size_t)length, 0) != length) {
        /* informative only: the lock is what counts */
    }
    return fd;
}

int uid_block_claim(const char *data_dir, uid_block *out, char *why, size_t why_size)
{
    if (fs_mkdir_p(UID_BLOCK_LOCK_DIR, 0700) < 0) {
        snprintf(why, why_size, "cannot create %s: %s", UID_BLOCK_LOCK_DIR, strerror(errno));
        return -1;
    }
    int previous = read_recorded_block(data_dir);
    static bool running[UID_BLOCK_COUNT];
    memset(running, 0, sizeof running);
    mark_blocks_running(running);
    /* The recorded block first: what runs under it is this data directory's own (the
       reconciliation that follows deals with it). */
    int fd = previous >= 0 ? try_lock_block(previous, data_dir) : -1;
    int number = previous;
    for (int candidate = 0; fd < 0 && candidate < UID_BLOCK_COUNT; candidate++) {
        if (candidate == previous || running[candidate])
            continue;
        fd = try_lock_block(candidate, data_dir);
        number = candidate;
    }
    if (fd < 0) {
        snprintf(why, why_size, "no free block of sandbox uids: all %d blocks of %d under %s are "
                 "held by other daemons or used by running processes", UID_BLOCK_COUNT,
                 UID_BLOCK_SIZE, UID_BLOCK_LOCK_DIR);
        return -1;
    }
    if (number != previous && record_block(data_dir, number) < 0) {
        snprintf(why, why_size, "cannot record the uid block in %.4000s/uid-block: %s", data_dir,
                 strerror(errno));
        close(fd);
        return -1;
    }
    block_lock_fd = fd;
    *out = (uid_block){.number = number,
                       .first = UID_BLOCK_BASE + (uid_t)number * UID_BLOCK_SIZE,
                       .same_as_before = number == previous,
                       .previous = previous};
    return 0;
}
