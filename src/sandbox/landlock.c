#include "sandbox/landlock.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/rootfs.h"

#define READ_ACCESS (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
#define WRITE_ACCESS_V1                                                                            \
    (LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE | \
     LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |      \
     LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |   \
     LANDLOCK_ACCESS_FS_MAKE_SYM)

static int add_rule(int ruleset, const char *path, __u64 access)
{
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    struct landlock_path_beneath_attr rule = {.allowed_access = access, .parent_fd = fd};
    int rc = (int)syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
    close(fd);
    return rc;
}

/* Write access beneath each named volume the sandbox's root lists (rootfs.h): the file is on the
   read-only root, written when the sandbox was built. None listed: nothing to add. Read with
   plain read(2) into the stack, no stdio: a zygote's clone shares its memory (sandbox.h) and
   must not allocate. */
static int add_volume_rules(int ruleset, __u64 access)
{
    int fd = open(ROOTFS_VOLUME_LIST, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    char list[ROOTFS_MAX_VOLUMES * (ROOTFS_VOLUME_PATH_MAX + 1) + 1];
    ssize_t n = read(fd, list, sizeof list - 1);
    close(fd);
    if (n < 0)
        return -1;
    list[n] = '\0';
    int rc = 0;
    for (char *line = list, *end; rc == 0 && *line; line = end + 1) {
        end = strchr(line, '\n');
        if (!end)
            break;
        *end = '\0';
        if (line[0] == '/')
            rc = add_rule(ruleset, line, access);
    }
    return rc;
}

int landlock_restrict(void)
{
    int abi = (int)syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 1)
        return 0;
    __u64 write_access = WRITE_ACCESS_V1;
    if (abi >= 2)
        write_access |= LANDLOCK_ACCESS_FS_REFER;
#ifdef LANDLOCK_ACCESS_FS_TRUNCATE
    if (abi >= 3)
        write_access |= LANDLOCK_ACCESS_FS_TRUNCATE;
#endif
    struct landlock_ruleset_attr attr = {.handled_access_fs = READ_ACCESS | write_access};
    int ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (ruleset < 0)
        return -1;
    /* Device files are written (/dev/null, ptys) but never created. */
    __u64 device_write = LANDLOCK_ACCESS_FS_WRITE_FILE;
#ifdef LANDLOCK_ACCESS_FS_TRUNCATE
    if (abi >= 3)
        device_write |= LANDLOCK_ACCESS_FS_TRUNCATE;
#endif
    int rc = add_rule(ruleset, "/", READ_ACCESS);
    if (rc == 0) rc = add_rule(ruleset, "/workspace", READ_ACCESS | write_access);
    if (rc == 0) rc = add_rule(ruleset, "/tmp", READ_ACCESS | write_access);
    if (rc == 0) rc = add_rule(ruleset, "/dev/shm", READ_ACCESS | write_access);
    if (rc == 0) rc = add_rule(ruleset, "/dev", READ_ACCESS | device_write);
    if (rc == 0) rc = add_rule(ruleset, "/proc", READ_ACCESS | device_write);
    if (rc == 0) rc = add_volume_rules(ruleset, READ_ACCESS | write_access);
    if (rc == 0)
        rc = (int)syscall(SYS_landlock_restrict_self, ruleset, 0);
    close(ruleset);
    return rc == 0 ? abi : -1;
}
