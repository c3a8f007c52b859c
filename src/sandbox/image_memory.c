/* image_memory — see image_memory.h. */
#include "sandbox/image_memory.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <unistd.h>

#include "common/log.h"

static int huge_mount_fd = -1; /* the detached tmpfs's root */
static bool huge_mount_tried;

/* The tmpfs, made once: fsopen, its options, fsmount; never move_mount'ed, so it is in no
   mount namespace's tree, and lives as long as huge_mount_fd (the daemon). nosuid, nodev; not
   noexec: a library the kernel loaded after its clone is carried as image pages, which the
   restorer maps executable (PROT_EXEC from a noexec mount is refused). */
static int make_huge_mount(char *why, size_t why_size)
{
    int fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
    if (fs < 0) {
        snprintf(why, why_size, "fsopen(tmpfs): %s", strerror(errno));
        return -1;
    }
    int mount_fd = -1;
    if (fsconfig(fs, FSCONFIG_SET_STRING, "huge", "always", 0) < 0 ||
        fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0700", 0) < 0 ||
        fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0 ||
        (mount_fd = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)) < 0)
        snprintf(why, why_size, "a tmpfs with huge=always: %s", strerror(errno));
    close(fs);
    return mount_fd;
}

static int lock_whole(int fd, short type, int command)
{
    struct flock lock = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    return fcntl(fd, command, &lock);
}

static int new_file(char *why, size_t why_size)
{
    if (!huge_mount_tried) {
        huge_mount_tried = true;
        char reason[300];
        huge_mount_fd = make_huge_mount(reason, sizeof reason);
        if (huge_mount_fd < 0)
            log_warn("fork images on 4 KiB pages (a memfd), slower to write: %s", reason);
    }
    int fd = huge_mount_fd >= 0
                 ? openat(huge_mount_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600)
                 : memfd_create("cellbox-fork-image", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        snprintf(why, why_size, "cannot create a file in memory for the image: %s",
                 strerror(errno));
    return fd;
}

int image_memory_create(int *reader, char *why, size_t why_size)
{
    *reader = -1;
    int writer = new_file(why, why_size);
    if (writer < 0)
        return -1;
    /* Locked before the reader exists: no restore can find the file unlocked and empty. */
    if (lock_whole(writer, F_WRLCK, F_OFD_SETLK) < 0) {
        snprintf(why, why_size, "cannot lock the image while it is written: %s", strerror(errno));
        close(writer);
        return -1;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", writer);
    *reader = open(path, O_RDONLY | O_CLOEXEC);
    if (*reader < 0) {
        snprintf(why, why_size, "cannot open the image read-only: %s", strerror(errno));
        close(writer);
        return -1;
    }
    return writer;
}

int image_memory_finish(int writer, char *why, size_t why_size)
{
    int rc = 0;
    int seals = fcntl(writer, F_GET_SEALS); /* a tmpfs file says F_SEAL_SEAL: it takes none */
    if (seals >= 0 && !(seals & F_SEAL_SEAL) &&
        fcntl(writer, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
        snprintf(why, why_size, "cannot seal the image: %s", strerror(errno));
        rc = -1;
    }
    close(writer); /* its lock goes with it */
    return rc;
}
