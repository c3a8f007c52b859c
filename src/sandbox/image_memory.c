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

static int huge_mount_fd = -1; /* the detached tmpfs's root, O_PATH */
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

int image_memory_create(char *why, size_t why_size)
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

int image_memory_freeze(int fd, char *why, size_t why_size)
{
    int seals = fcntl(fd, F_GET_SEALS); /* a tmpfs file says F_SEAL_SEAL: it takes none */
    if (seals >= 0 && !(seals & F_SEAL_SEAL)) {
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == 0)
            return fd;
        snprintf(why, why_size, "cannot seal the image: %s", strerror(errno));
        close(fd);
        return -1;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int read_only = open(path, O_RDONLY | O_CLOEXEC);
    if (read_only < 0)
        snprintf(why, why_size, "cannot reopen the image read-only: %s", strerror(errno));
    close(fd);
    return read_only;
}
