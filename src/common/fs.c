#include "common/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_mkdir_p(const char *path, mode_t mode)
{
    char partial[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof partial) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(partial, path, len + 1);
    for (char *p = partial + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(partial, mode) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(partial, mode) < 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* Empties the directory open at dirfd, descending only through real directories opened with
   O_NOFOLLOW relative to their parent's descriptor, so a link swapped in cannot redirect us. */
static int remove_contents(int dirfd)
{
    DIR *dir = fdopendir(dirfd);
    if (!dir) {
        close(dirfd);
        return -1;
    }
    int result = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        const char *name = entry->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        if (unlinkat(dirfd, name, 0) == 0)
            continue;
        if (errno != EISDIR && errno != EPERM)
            continue; /* vanished meanwhile: fine */
        int child = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (child < 0 || remove_contents(child) < 0 || unlinkat(dirfd, name, AT_REMOVEDIR) < 0)
            result = -1;
    }
    closedir(dir);
    return result;
}

int fs_remove_tree(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : unlink(path);
    if (remove_contents(fd) < 0)
        return -1;
    return rmdir(path);
}

int fs_count_open_descriptors(void)
{
    DIR *dir = opendir("/proc/self/fd");
    if (!dir)
        return -1;
    int count = 0;
    for (struct dirent *entry; (entry = readdir(dir));)
        count += entry->d_name[0] != '.';
    closedir(dir);
    return count - 1; /* the directory's own descriptor */
}
