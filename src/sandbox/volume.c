#include "sandbox/volume.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/log.h"
#include "sandbox/limits.h"

/* mkfs.ext4 from e2fsprogs: no journal (the sandbox's scratch space), lazy init (fast), no
   reserved blocks, one inode per 16 KiB. */
static int make_filesystem(const char *image, char *why, size_t why_size)
{
    const char *owner = "lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0";
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);
        dup2(devnull, 0);
        dup2(devnull, 1);
        execl("/sbin/mkfs.ext4", "mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0", "-i",
              "16384", "-E", owner, "-L", "workspace", image, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(why, why_size, "mkfs.ext4 failed on %s (status %d; is e2fsprogs installed?)", image,
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return -1;
    }
    return 0;
}

/* Attaches the image to a free loop device that detaches itself on unmount, and mounts it;
   read_only: the device too, so that not one byte of the image changes (a sealed snapshot's). */
static int mount_image(const char *image, const char *mount_point, bool read_only, char *why,
                       size_t why_size)
{
    int control = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    int backing = open(image, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (control < 0 || backing < 0) {
        snprintf(why, why_size, "cannot open %s: %s", control < 0 ? "/dev/loop-control" : image,
                 strerror(errno));
        goto fail;
    }
    for (int attempt = 0; attempt < 16; attempt++) {
        int number = ioctl(control, LOOP_CTL_GET_FREE);
        char device[64];
        snprintf(device, sizeof device, "/dev/loop%d", number);
        int loop = number < 0 ? -1 : open(device, O_RDWR | O_CLOEXEC);
        if (loop < 0)
            continue;
        struct loop_config config = {
            .fd = (unsigned)backing,
            .info = {.lo_flags = LO_FLAGS_AUTOCLEAR | (read_only ? LO_FLAGS_READ_ONLY : 0)}};
        if (ioctl(loop, LOOP_CONFIGURE, &config) < 0) {
            close(loop);
            if (errno == EBUSY)
                continue; /* another process took it first */
            snprintf(why, why_size, "cannot attach %s to %s: %s", image, device, strerror(errno));
            goto fail;
        }
        unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOATIME | (read_only ? MS_RDONLY : 0);
        int rc = mount(device, mount_point, "ext4", flags, read_only ? "noload" : "");
        int saved = errno;
        close(loop); /* the mount holds it now; AUTOCLEAR frees it on unmount */
        if (rc < 0) {
            snprintf(why, why_size, "cannot mount %s on %s: %s", device, mount_point, strerror(saved));
            goto fail;
        }
        close(control);
        close(backing);
        return 0;
    }
    snprintf(why, why_size, "no free loop device for %s", image);
fail:
    if (control >= 0)
        close(control);
    if (backing >= 0)
        close(backing);
    return -1;
}

int volume_mount_image(const char *image, const char *mount_point, char *why, size_t why_size)
{
    return mount_image(image, mount_point, false, why, why_size);
}

int volume_mount_image_read_only(const char *image, const char *mount_point, char *why,
                                 size_t why_size)
{
    return mount_image(image, mount_point, true, why, why_size);
}

/* ---- templates: mkfs once per size, then copy ---- */

/* The first ext4 volume of each size is made by mkfs.ext4 into a template image beside the
   volumes; every later one copies the template's data blocks into a new sparse file (about
   600 KiB of metadata for 1 GiB: well under a millisecond, against an exec of mkfs.ext4 that
   holds the daemon's loop for tens of milliseconds). The templates go at shutdown, those the
   volume helper made too (volume_note_template). */
#define MAX_TEMPLATES 16

static struct {
    long long bytes;
    char path[4200];
} templates[MAX_TEMPLATES];
static int template_count;

/* The template of this size (made here or by the volume helper), or a new entry for it. */
static int template_entry(const char *image, long long bytes)
{
    for (int i = 0; i < template_count; i++)
        if (templates[i].bytes == bytes)
            return i;
    if (template_count == MAX_TEMPLATES)
        return -1; /* unusual sizes: mkfs each time */
    const char *slash = strrchr(image, '/');
    int dir_length = slash ? (int)(slash - image) : 1;
    templates[template_count].bytes = bytes;
    snprintf(templates[template_count].path, sizeof templates[template_count].path,
             "%.*s/template-%lld.img", dir_length, slash ? image : ".", bytes);
    return template_count++;
}

void volume_note_template(const char *image, long long bytes)
{
    (void)template_entry(image, bytes);
}

static const char *template_for(const char *image, long long bytes, char *why, size_t why_size)
{
    int entry = template_entry(image, bytes);
    if (entry < 0)
        return NULL;
    const char *path = templates[entry].path;
    if (access(path, R_OK) == 0)
        return path;
    /* The daemon and its volume helper may both make one: each in its own partial file. */
    char partial[4300];
    snprintf(partial, sizeof partial, "%s.%d.partial", path, (int)getpid());
    int fd = open(partial, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, bytes) < 0) {
        snprintf(why, why_size, "cannot create the template image %s: %s", partial, strerror(errno));
        if (fd >= 0)
            close(fd), unlink(partial);
        return NULL;
    }
    close(fd);
    if (make_filesystem(partial, why, why_size) < 0 || rename(partial, path) < 0) {
        unlink(partial);
        return NULL;
    }
    return path;
}

/* Copies the data extents of `from` into the (sparse, same-sized) file `to`. */
static int copy_extents(const char *from, int to, char *why, size_t why_size)
{
    int src = open(from, O_RDONLY | O_CLOEXEC);
    if (src < 0) {
        snprintf(why, why_size, "cannot open %s: %s", from, strerror(errno));
        return -1;
    }
    off_t offset = 0;
    for (;;) {
        off_t data = lseek(src, offset, SEEK_DATA);
        if (data < 0)
            break; /* ENXIO: no more data */
        off_t hole = lseek(src, data, SEEK_HOLE);
        loff_t in = data, out = data;
        size_t left = (size_t)(hole - data);
        while (left > 0) {
            ssize_t n = copy_file_range(src, &in, to, &out, left, 0);
            if (n <= 0) {
                snprintf(why, why_size, "cannot copy %s: %s", from, n < 0 ? strerror(errno) : "short copy");
                close(src);
                return -1;
            }
            left -= (size_t)n;
        }
        offset = hole;
    }
    close(src);
    return 0;
}

bool volume_describe_full(const char *mount_point, long long disk_bytes, char *out, size_t size)
{
    volume_usage usage;
    if (volume_read_usage(mount_point, &usage) < 0)
        return false;
    char limit[32];
    limits_format_size(disk_bytes, limit, sizeof limit);
    /* A write that failed for lack of space leaves up to its own size free: "full" is what a
       write of ordinary size can no longer fit. */
    long long nearly_full =
        usage.bytes_total / 100 > (1 << 20) ? usage.bytes_total / 100 : (1 << 20);
    bool no_bytes = usage.bytes_free < nearly_full, no_inodes = usage.inodes_free == 0;
    if (no_bytes && no_inodes)
        snprintf(out, size,
                 "[cellbox: disk quota %s exceeded and no free inodes left: /workspace "
                 "is full; delete files]\n",
                 limit);
    else if (no_bytes)
        snprintf(out, size, "[cellbox: disk quota %s exceeded: /workspace is full]\n", limit);
    else if (no_inodes)
        snprintf(out, size,
                 "[cellbox: /workspace has no free inodes: it holds %lld files and "
                 "directories at most (disk quota %s); delete files to create new ones]\n",
                 usage.inodes_total, limit);
    return no_bytes || no_inodes;
}

void volume_shutdown(void)
{
    for (int i = 0; i < template_count; i++)
        unlink(templates[i].path);
    template_count = 0;
}

int volume_parse_kind(const char *name, volume_kind *out)
{
    if (strcmp(name, "ext4") == 0)
        *out = VOLUME_EXT4;
    else if (strcmp(name, "tmpfs") == 0)
        *out = VOLUME_TMPFS;
    else
        return -1;
    return 0;
}

static int create_tmpfs(const char *mount_point, long long bytes, uid_t uid, gid_t gid, char *why,
                        size_t why_size)
{
    char options[160];
    /* One inode per 16 KiB, as the ext4 volumes: an inode bomb ends at the same bound. */
    snprintf(options, sizeof options, "size=%lld,nr_inodes=%lld,mode=0700,uid=%u,gid=%u", bytes,
             bytes / 16384 + 1024, uid, gid);
    if (fs_mkdir_p(mount_point, 0700) < 0 ||
        mount("tmpfs", mount_point, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOATIME, options) < 0) {
        snprintf(why, why_size, "cannot mount the workspace on %s: %s", mount_point, strerror(errno));
        rmdir(mount_point);
        return -1;
    }
    return 0;
}

int volume_create(volume_kind kind, const char *image, const char *mount_point, long long bytes,
                  uid_t uid, gid_t gid, char *why, size_t why_size)
{
    if (kind == VOLUME_TMPFS)
        return create_tmpfs(mount_point, bytes, uid, gid, why, why_size);
    const char *template = template_for(image, bytes, why, why_size);
    int fd = open(image, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, bytes) < 0) {
        snprintf(why, why_size, "cannot create the workspace image %s: %s", image, strerror(errno));
        if (fd >= 0)
            close(fd), unlink(image);
        return -1;
    }
    int filled = template ? copy_extents(template, fd, why, why_size) : 0;
    close(fd);
    if (fs_mkdir_p(mount_point, 0700) < 0) {
        snprintf(why, why_size, "cannot create %s: %s", mount_point, strerror(errno));
        unlink(image);
        return -1;
    }
    if (filled < 0 || (!template && make_filesystem(image, why, why_size) < 0) ||
        volume_mount_image(image, mount_point, why, why_size) < 0) {
        rmdir(mount_point);
        unlink(image);
        return -1;
    }
    if (chown(mount_point, uid, gid) < 0) { /* the volume's root belongs to the sandbox user */
        snprintf(why, why_size, "cannot give %s to the sandbox user: %s", mount_point, strerror(errno));
        volume_destroy(image, mount_point, 0);
        return -1;
    }
    /* Clear the default "lost+found" clutter from the user's view. */
    char lost[4200];
    snprintf(lost, sizeof lost, "%.4000s/lost+found", mount_point);
    rmdir(lost);
    return 0;
}

void volume_destroy(const char *image, const char *mount_point, int keep)
{
    if (keep) {
        /* The detach below is lazy: the sandbox's dying processes still hold the mount, and its
           dirty pages reach the image only when the last of them is gone, after the delete has
           been answered. A kept image must already hold every write the kernel finished. */
        int fd = open(mount_point, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0) {
            if (syncfs(fd) < 0)
                log_warn("cannot sync the kept workspace %s: %s", mount_point, strerror(errno));
            close(fd);
        }
    }
    if (umount2(mount_point, MNT_DETACH) == 0 || errno == EINVAL)
        rmdir(mount_point);
    if (!keep)
        unlink(image); /* kept: `mount -o loop IMAGE DIR` shows the files again */
}

int volume_read_usage(const char *mount_point, volume_usage *out)
{
    struct statvfs st;
    if (statvfs(mount_point, &st) < 0)
        return -1;
    /* f_bavail, not f_bfree: ext4 keeps blocks the sandbox user cannot have. */
    out->bytes_total = (long long)st.f_blocks * (long long)st.f_frsize;
    out->bytes_free = (long long)st.f_bavail * (long long)st.f_frsize;
    out->inodes_total = (long long)st.f_files;
    out->inodes_free = (long long)st.f_favail;
    return 0;
}

/* ---- leftovers of a dead daemon ---- */

static bool is_mount_point(const char *path)
{
    char parent[4200];
    snprintf(parent, sizeof parent, "%.4000s/..", path);
    struct stat here, above;
    return lstat(path, &here) == 0 && S_ISDIR(here.st_mode) && stat(parent, &above) == 0 &&
           here.st_dev != above.st_dev;
}

/* /sys/block/loopN/loop/backing_file names the image (with " (deleted)" once unlinked). */
static void detach_loops_backed_by(const char *image)
{
    DIR *block = opendir("/sys/block");
    if (!block)
        return;
    size_t length = strlen(image);
    for (struct dirent *entry; (entry = readdir(block));) {
        if (strncmp(entry->d_name, "loop", 4) != 0)
            continue;
        char path[600], backing[4200] = "";
        snprintf(path, sizeof path, "/sys/block/%.255s/loop/backing_file", entry->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue; /* not attached */
        bool read = fgets(backing, sizeof backing, f) != NULL;
        fclose(f);
        backing[strcspn(backing, "\n")] = '\0';
        if (!read || strncmp(backing, image, length) != 0 ||
            (backing[length] != '\0' && strcmp(backing + length, " (deleted)") != 0))
            continue;
        snprintf(path, sizeof path, "/dev/%.255s", entry->d_name);
        int loop = open(path, O_RDWR | O_CLOEXEC);
        if (loop < 0 || ioctl(loop, LOOP_CLR_FD) < 0)
            log_warn("cannot detach %s from %s: %s", path, image, strerror(errno));
        if (loop >= 0)
            close(loop);
    }
    closedir(block);
}

void volume_remove_leftover(const char *image, const char *mount_point, bool keep)
{
    if (is_mount_point(mount_point)) {
        int fd = keep ? open(mount_point, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (fd >= 0) {
            syncfs(fd);
            close(fd);
        }
        if (umount2(mount_point, 0) < 0 && umount2(mount_point, MNT_DETACH) < 0)
            log_warn("cannot unmount %s: %s", mount_point, strerror(errno));
    }
    if (image) {
        char *real = realpath(image, NULL); /* sysfs names the path the loop device was given */
        detach_loops_backed_by(real ? real : image);
        free(real);
    }
    if (!is_mount_point(mount_point) && fs_remove_tree(mount_point) < 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", mount_point, strerror(errno));
    if (image && !keep && unlink(image) < 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", image, strerror(errno));
}

void volume_remove_leftover_templates(const char *folder)
{
    DIR *dir = opendir(folder);
    if (!dir)
        return;
    for (struct dirent *entry; (entry = readdir(dir));) {
        const char *name = entry->d_name;
        size_t length = strlen(name);
        bool partial = length > 8 && strcmp(name + length - 8, ".partial") == 0;
        if (partial || strncmp(name, "template-", 9) == 0)
            unlinkat(dirfd(dir), name, 0);
    }
    closedir(dir);
}
