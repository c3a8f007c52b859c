/* volume — a sandbox's /workspace with a real size limit (ENOSPC, never a full host disk) and a
 * bounded inode count, mounted (nosuid, nodev) at DATA_DIR/workspaces/<id>. Two kinds:
 *   ext4   an image in DATA_DIR/volumes on a loop device: on disk, kept with --keep-workspaces
 *          (~35 ms to make: mkfs and mount)
 *   tmpfs  in memory, its pages counted against the sandbox's memory limit; gone with the
 *          sandbox (~0.1 ms to make: for pipelines that create thousands of short sandboxes) */
#ifndef CELLBOX_SANDBOX_VOLUME_H
#define CELLBOX_SANDBOX_VOLUME_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef enum volume_kind { VOLUME_EXT4, VOLUME_TMPFS } volume_kind;

int volume_parse_kind(const char *name, volume_kind *out); /* "ext4" or "tmpfs"; 0 or -1 */
/* Makes a volume of `bytes`, its root owned by uid:gid, mounted at mount_point (image is used by
   ext4 only). 0 or -1 + why. */
int volume_create(volume_kind kind, const char *image, const char *mount_point, long long bytes,
                  uid_t uid, gid_t gid, char *why, size_t why_size);
/* Unmounts (the loop device detaches itself) and, unless `keep` (--keep-workspaces), deletes
   the ext4 image; a kept image can be mounted again with `mount -o loop`. A tmpfs volume's files
   cannot be kept. */
/* Mounts an existing ext4 image (nosuid, nodev, noatime) at mount_point, an existing directory,
   through a loop device that detaches itself on unmount. 0, or -1 + why. */
int volume_mount_image(const char *image, const char *mount_point, char *why, size_t why_size);
/* The same, read-only down to the loop device (a snapshot's image, read for a restore). */
int volume_mount_image_read_only(const char *image, const char *mount_point, char *why,
                                 size_t why_size);
void volume_destroy(const char *image, const char *mount_point, int keep);
typedef struct volume_usage {
    long long bytes_total, bytes_free;   /* free = what the sandbox user can still write */
    long long inodes_total, inodes_free;
} volume_usage;

int volume_read_usage(const char *mount_point, volume_usage *out); /* 0, or -1 */
/* After a cell or a command: when the volume at mount_point (the sandbox's /workspace, of
   disk_bytes) is full, a line for its stderr naming the limit reached, bytes or inodes (files:
   many small ones run out of inodes with bytes to spare), and what to do; false otherwise. */
bool volume_describe_full(const char *mount_point, long long disk_bytes, char *out, size_t size);
void volume_shutdown(void); /* removes the ext4 templates (see volume.c) */
/* At start, for a volume a dead daemon left (its sandbox's processes already killed): unmounts
   mount_point (synced first if kept), detaches every loop device still backed by `image` (its
   auto-clear does not run while another namespace held the mount), removes mount_point and,
   unless `keep`, the image. Idempotent: what is already gone is skipped. */
void volume_remove_leftover(const char *image, const char *mount_point, bool keep);
/* At start: the templates and half-made images (*.partial) a dead daemon left in `folder`. */
void volume_remove_leftover_templates(const char *folder);
/* Another process (the volume helper) makes ext4 volumes of `bytes` beside `image`: their
   template is one volume_shutdown() removes too, and one this process may use. */
void volume_note_template(const char *image, long long bytes);

/* ---- volume_copy.c: a running sandbox's workspace copied (snapshots, forks) ---- */
typedef struct volume_copy_stats {
    long long bytes;      /* data copied (0 for a reflink: no data moved) */
    long long files;      /* entries copied (tree copies) */
    bool reflinked;       /* the image was cloned (FICLONE), sharing its extents */
    long long elapsed_us; /* how long it took, the mount frozen for ext4 */
} volume_copy_stats;
/* Copies the workspace mounted at from_mount to `to`. ext4: from_image is its image, frozen
   (FIFREEZE) while a reflink (FICLONE) or sparse copy of it is made into the new file `to`, then
   thawed. tmpfs: the directory `to` is made and the tree copied into it, links never followed,
   owners kept. 0, or -1 with errno and `why` (ENOSPC from a full disk as such); a failed ext4
   copy leaves nothing, a failed tree copy leaves `to` for the caller to remove. */
int volume_copy(volume_kind kind, const char *from_image, const char *from_mount, const char *to,
                volume_copy_stats *stats, char *why, size_t why_size);
/* Copies the tree in the directory from_dir into the existing directory to_dir: regular files,
   directories and links (never followed); FIFOs, sockets and devices left out; set-id bits
   dropped; everything owned by uid:gid ((uid_t)-1: the source's owners). Adds to `stats`. 0, or
   -1 with errno and `why`. */
int volume_copy_tree(const char *from_dir, const char *to_dir, uid_t uid, gid_t gid,
                     volume_copy_stats *stats, char *why, size_t why_size);
/* The same between directories already open (borrowed): for a copy on a worker thread, whose
   descriptors stay on the volumes they were opened on whatever is mounted at their paths since. */
int volume_copy_tree_at(int from_dir, int to_dir, uid_t uid, gid_t gid, volume_copy_stats *stats,
                        char *why, size_t why_size);

#endif
