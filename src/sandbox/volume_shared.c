#include "sandbox/volume_shared.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <dirent.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/log.h"
#include "sandbox/volume.h"

int volume_shared_create(const char *image, const char *mount_point, long long bytes, char *why,
                         size_t why_size)
{
    return volume_create(VOLUME_EXT4, image, mount_point, bytes, VOLUME_SHARED_OWNER,
                         VOLUME_SHARED_OWNER, why, why_size);
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

/* ---- a sandbox's views ---- */

/* Writes a uid_map or gid_map in one write(2), as the kernel requires. 0 or -1 with errno. */
static int write_map(const char *path, const char *map)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t length = (ssize_t)strlen(map), n = write(fd, map, (size_t)length);
    int saved = errno;
    close(fd);
    errno = saved;
    return n == length ? 0 : -1;
}

/* A user namespace that maps VOLUME_SHARED_OWNER to uid (and gid) and nothing else, as a
   descriptor: what an id-mapped mount is given. Made by a child that only unshares and waits
   while its maps are written from here (root in the host's namespace may write them). -1 + why. */
static int owner_mapping_namespace(uid_t uid, gid_t gid, char *why, size_t why_size)
{
    int ready[2], done[2];
    if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(done, O_CLOEXEC) < 0) {
        snprintf(why, why_size, "cannot create a pipe: %s", strerror(errno));
        return -1; /* a pipe of the first pair may leak: only when descriptors ran out */
    }
    pid_t child = fork();
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(ready[0]);
        close(done[1]); /* else its own copy would keep the read below from ever ending */
        char byte = unshare(CLONE_NEWUSER) == 0 ? 'y' : 'n';
        if (write(ready[1], &byte, 1) == 1)
            (void)!read(done[0], &byte, 1); /* until the parent has opened the namespace */
        _exit(0);
    }
    close(ready[1]);
    close(done[0]);
    char byte = 'n';
    int fd = -1;
    if (child > 0 && read(ready[0], &byte, 1) == 1 && byte == 'y') {
        char path[64], map[64];
        snprintf(map, sizeof map, "%u %u 1\n", VOLUME_SHARED_OWNER, (unsigned)uid);
        snprintf(path, sizeof path, "/proc/%d/uid_map", (int)child);
        int ok = write_map(path, map);
        snprintf(map, sizeof map, "%u %u 1\n", VOLUME_SHARED_OWNER, (unsigned)gid);
        snprintf(path, sizeof path, "/proc/%d/gid_map", (int)child);
        ok = ok == 0 ? write_map(path, map) : -1;
        snprintf(path, sizeof path, "/proc/%d/ns/user", (int)child);
        fd = ok == 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    }
    if (fd < 0)
        snprintf(why, why_size, "cannot make the user namespace of a volume view: %s",
                 child < 0 || byte == 'y' ? strerror(errno) : "unshare(CLONE_NEWUSER) failed");
    close(ready[0]);
    close(done[1]);
    if (child > 0)
        waitpid(child, NULL, 0);
    return fd;
}

int volume_shared_open_view(const char *mount_point, const char *view, uid_t uid, gid_t gid,
                            char *why, size_t why_size)
{
    if (is_mounted(view))
        return 0;
    if (fs_mkdir_p(view, 0700) < 0) {
        snprintf(why, why_size, "cannot create %s: %s", view, strerror(errno));
        return -1;
    }
    int userns = owner_mapping_namespace(uid, gid, why, why_size);
    if (userns < 0)
        return -1;
    /* A detached copy of the volume's mount, id-mapped before anything can see it, then
       attached at the view. */
    int tree = (int)syscall(SYS_open_tree, AT_FDCWD, mount_point,
                            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    struct mount_attr attributes = {.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID |
                                                MOUNT_ATTR_NODEV,
                                    .userns_fd = (unsigned)userns};
    int rc = tree < 0 ? -1
             : (int)syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attributes,
                            sizeof attributes);
    if (rc == 0)
        rc = (int)syscall(SYS_move_mount, tree, "", AT_FDCWD, view, MOVE_MOUNT_F_EMPTY_PATH);
    int saved = errno;
    close(userns);
    if (tree >= 0)
        close(tree);
    if (rc < 0) {
        snprintf(why, why_size, "cannot mount the id-mapped view %s of %s: %s (the kernel needs "
                 "id-mapped mounts of ext4, Linux 5.12 or later)", view, mount_point,
                 strerror(saved));
        rmdir(view);
        return -1;
    }
    return 0;
}

void volume_shared_close_views(const char *folder)
{
    DIR *dir = opendir(folder);
    if (!dir)
        return;
    for (struct dirent *entry; (entry = readdir(dir));) {
        if (entry->d_name[0] == '.')
            continue;
        char view[4400];
        snprintf(view, sizeof view, "%.4000s/%.255s", folder, entry->d_name);
        if (is_mounted(view) && umount2(view, MNT_DETACH) < 0)
            log_warn("cannot unmount the volume view %s: %s", view, strerror(errno));
        rmdir(view);
    }
    closedir(dir);
    rmdir(folder);
}
