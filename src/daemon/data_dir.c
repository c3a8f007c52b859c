#include "daemon/data_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "common/fs.h"

static int lock_fd = -1; /* open for the daemon's lifetime: closing it would release the lock */

static int holder_pid(int fd)
{
    char text[32] = "";
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = '\0';
    return atoi(text);
}

int data_dir_lock(const char *data_dir, char *why, size_t why_size)
{
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/lock", data_dir);
    if (fs_mkdir_p(data_dir, 0700) < 0) {
        snprintf(why, why_size, "cannot create the data directory %.4000s: %s (choose another with "
                 "--data-dir)", data_dir, strerror(errno));
        return -1;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf(why, why_size, "cannot open %.4000s: %s", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int saved = errno;
        int pid = holder_pid(fd);
        close(fd);
        if (saved == EWOULDBLOCK)
            snprintf(why, why_size, "the data directory %.4000s is in use by another cellboxd "
                     "(pid %d holds %s): stop that one first, or give this one its own --data-dir",
                     data_dir, pid, path);
        else
            snprintf(why, why_size, "cannot lock %.4000s: %s", path, strerror(saved));
        return -1;
    }
    char pid[32];
    int length = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)length, 0) != length) {
        snprintf(why, why_size, "cannot write %.4000s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    lock_fd = fd;
    return 0;
}
