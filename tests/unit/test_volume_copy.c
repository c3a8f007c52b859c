/* The workspace copy (sandbox/volume_copy.c): a tree copy carries files, directories and links
   (never following a link out of the tree), leaves FIFOs out, drops set-id bits and gives every
   entry the new owner; an ext4 volume copy, made while the volume is mounted and written, is the
   same filesystem with the same files, sparse, and the source mount is thawed afterwards (it
   takes writes again). Needs root for the ext4 part (loop devices): skipped otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "common/fs.h"
#include "sandbox/volume.h"

static char base[] = "/tmp/cellbox-volume-copy-XXXXXX";

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static char *read_file(const char *path, char *out, size_t size)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t n = fread(out, 1, size - 1, f);
    out[n] = '\0';
    fclose(f);
    return out;
}

static void test_a_tree_copy_carries_files_and_links_but_never_follows_one(void)
{
    char from[256], to[256], path[512], text[64];
    snprintf(from, sizeof from, "%s/tree", base);
    snprintf(to, sizeof to, "%s/tree-copy", base);
    mkdir(from, 0755);
    mkdir(to, 0700);
    snprintf(path, sizeof path, "%s/a.txt", from);
    write_file(path, "alpha");
    chmod(path, 04755); /* set-uid: dropped in the copy */
    snprintf(path, sizeof path, "%s/sub", from);
    mkdir(path, 0750);
    snprintf(path, sizeof path, "%s/sub/b.txt", from);
    write_file(path, "beta");
    snprintf(path, sizeof path, "%s/escape", from);
    symlink("/etc/shadow", path); /* a planted link: copied as a link, its target never read */
    snprintf(path, sizeof path, "%s/pipe", from);
    mkfifo(path, 0600); /* would block a reader: left out */

    volume_copy_stats stats = {0};
    char why[256] = "";
    CHECK(volume_copy_tree(from, to, 12345, 12346, &stats, why, sizeof why) == 0);
    snprintf(path, sizeof path, "%s/a.txt", to);
    CHECK_STR(read_file(path, text, sizeof text), "alpha");
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0755 && st.st_uid == 12345 &&
          st.st_gid == 12346);
    snprintf(path, sizeof path, "%s/sub/b.txt", to);
    CHECK_STR(read_file(path, text, sizeof text), "beta");
    snprintf(path, sizeof path, "%s/sub", to);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0750 && st.st_uid == 12345);
    snprintf(path, sizeof path, "%s/escape", to);
    char target[64] = "";
    CHECK(lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && st.st_uid == 12345);
    CHECK(readlink(path, target, sizeof target - 1) > 0 && strcmp(target, "/etc/shadow") == 0);
    snprintf(path, sizeof path, "%s/pipe", to);
    CHECK(lstat(path, &st) < 0 && errno == ENOENT);
    CHECK(stats.bytes == 9); /* alpha + beta */
}

static void test_an_ext4_copy_is_the_same_filesystem_and_the_source_thaws(void)
{
    if (geteuid() != 0) {
        printf("ok - skipped: not root\n");
        return;
    }
    char image[256], mount_point[256], copy[256], copy_mount[256], path[512], text[64];
    snprintf(image, sizeof image, "%s/source.img", base);
    snprintf(mount_point, sizeof mount_point, "%s/source", base);
    snprintf(copy, sizeof copy, "%s/copy.img", base);
    snprintf(copy_mount, sizeof copy_mount, "%s/copy", base);
    mkdir(mount_point, 0700);
    mkdir(copy_mount, 0700);
    char why[256] = "";
    CHECK(volume_create(VOLUME_EXT4, image, mount_point, 64 << 20, 0, 0, why, sizeof why) == 0);
    snprintf(path, sizeof path, "%s/kept.txt", mount_point);
    write_file(path, "written before the copy"); /* in the page cache: the freeze flushes it */

    volume_copy_stats stats;
    CHECK(volume_copy(VOLUME_EXT4, image, mount_point, copy, &stats, why, sizeof why) == 0);
    struct stat source_st, copy_st;
    CHECK(stat(image, &source_st) == 0 && stat(copy, &copy_st) == 0);
    CHECK(copy_st.st_size == source_st.st_size);
    CHECK(copy_st.st_blocks * 512 < copy_st.st_size / 4); /* sparse: metadata and data only */

    snprintf(path, sizeof path, "%s/after.txt", mount_point);
    write_file(path, "after"); /* the source is thawed: this write does not hang */
    CHECK_STR(read_file(path, text, sizeof text), "after");

    CHECK(volume_mount_image(copy, copy_mount, why, sizeof why) == 0);
    snprintf(path, sizeof path, "%s/kept.txt", copy_mount);
    CHECK_STR(read_file(path, text, sizeof text), "written before the copy");
    snprintf(path, sizeof path, "%s/after.txt", copy_mount);
    CHECK(access(path, F_OK) < 0); /* the copy is the moment it was made */
    volume_destroy(copy, copy_mount, 0);
    volume_destroy(image, mount_point, 0);
    volume_shutdown(); /* the template image beside them */
}

int main(void)
{
    if (!mkdtemp(base))
        return 1;
    RUN(test_a_tree_copy_carries_files_and_links_but_never_follows_one);
    RUN(test_an_ext4_copy_is_the_same_filesystem_and_the_source_thaws);
    fs_remove_tree(base);
    return check_summary("volume_copy");
}
