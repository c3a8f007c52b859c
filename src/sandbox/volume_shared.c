#include "sandbox/volume_shared.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/acl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/log.h"
#include "sandbox/volume.h"

/* Every sandbox user reads and writes what any other wrote: rwx for all on the root, and the
   same as the default ACL, which new entries inherit instead of the writer's umask. */
static int open_to_every_sandbox(const char *mount_point, char *why, size_t why_size)
{
    acl_t acl = acl_from_text("u::rwx,g::rwx,o::rwx");
    int rc = acl ? acl_set_file(mount_point, ACL_TYPE_DEFAULT, acl) : -1;
    int saved = errno;
    if (acl)
        acl_free(acl);
    if (rc < 0 || chmod(mount_point, 0777) < 0) {
        snprintf(why, why_size, "cannot open the volume's root %s to sandbox users: %s",
                 mount_point, strerror(rc < 0 ? saved : errno));
        return -1;
    }
    return 0;
}

int volume_shared_create(const char *image, const char *mount_point, long long bytes, char *why,
                         size_t why_size)
{
    if (volume_create(VOLUME_EXT4, image, mount_point, bytes, 0, 0, why, why_size) < 0)
        return -1;
    if (open_to_every_sandbox(mount_point, why, why_size) < 0) {
        volume_destroy(image, mount_point, 0);
        return -1;
    }
    return 0;
}

static bool is_mounted(const char *path)
{
    char parent[4200];
    snprintf(parent, sizeof parent, "%.4000s/..", path);
    struct stat here, above;
    return lstat(path, &here) == 0 && S_ISDIR(here.st_mode) && stat(parent, &above) == 0 &&
           here.st_dev != above.st_dev;
}

int volume_shared_mount(const char *image, const char *mount_point, char *why, size_t why_size)
{
    /* Two mounts of one ext4 filesystem through two loop devices would corrupt it. */
    if (is_mounted(mount_point))
        return 0;
    if (fs_mkdir_p(mount_point, 0700) < 0) {
        snprintf(why, why_size, "cannot create %s: %s", mount_point, strerror(errno));
        return -1;
    }
    return volume_mount_image(image, mount_point, why, why_size);
}

void volume_shared_unmount(const char *mount_point)
{
    if (is_mounted(mount_point) && umount2(mount_point, MNT_DETACH) < 0)
        log_warn("cannot unmount the volume at %s: %s", mount_point, strerror(errno));
}

void volume_shared_remove(const char *image, const char *mount_point)
{
    volume_shared_unmount(mount_point);
    if (rmdir(mount_point) < 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", mount_point, strerror(errno));
    if (unlink(image) < 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", image, strerror(errno));
}
