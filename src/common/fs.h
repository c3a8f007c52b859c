/* fs — directory helpers that never follow symbolic links (sandbox contents are hostile). */
#ifndef CELLBOX_COMMON_FS_H
#define CELLBOX_COMMON_FS_H

#include <sys/types.h>

int fs_mkdir_p(const char *path, mode_t mode); /* 0 or -1 with errno */
/* Removes `path` and everything beneath it. Links are removed, never followed; nothing outside
   the tree is touched even if the tree is changed while it is removed. 0 or -1 with errno. */
int fs_remove_tree(const char *path);
/* How many descriptors this process has open (from /proc/self/fd); -1 if it cannot tell. */
int fs_count_open_descriptors(void);

#endif
