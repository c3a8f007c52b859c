/* Confined file operations and tar archives beneath a fake sandbox root: what they do, and that
   no path, link, FIFO or archive entry reaches the host or blocks the daemon. Runs as root. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "api/errors.h"
#include "check.h"
#include "common/fs.h"
#include "sandbox/confined.h"
#include "sandbox/confined_tar.h"

#define USER 12345

static char root_dir[] = "/tmp/cellbox-confined-XXXXXX";
static char outside_dir[] = "/tmp/cellbox-outside-XXXXXX";
static confined c;

/* A path in the fake root, as the host sees it. */
static const char *host(const char *sandbox_path)
{
    static char buffers[4][4200];
    static int next;
    char *out = buffers[next++ % 4];
    snprintf(out, sizeof buffers[0], "%s%s", root_dir, sandbox_path);
    return out;
}

static void write_host_file(const char *path, const char *text, mode_t mode, uid_t owner)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    CHECK(chown(path, owner, owner) == 0 && chmod(path, mode) == 0);
}

static int put(const char *path, const char *text, bool *existed)
{
    int fd = confined_open_write(&c, path, 0644, existed);
    if (fd < 0)
        return -1;
    ssize_t wrote = write(fd, text, strlen(text));
    close(fd);
    return wrote == (ssize_t)strlen(text) ? 0 : -1;
}

/* The file's content, or NULL with c.error set. */
static const char *get(const char *path)
{
    static char content[256];
    struct stat st;
    int fd = confined_open_read(&c, path, &st);
    if (fd < 0)
        return NULL;
    ssize_t got = read(fd, content, sizeof content - 1);
    close(fd);
    content[got > 0 ? got : 0] = '\0';
    return content;
}

static const char *field(json_t *entry, const char *name)
{
    return json_string_value(json_object_get(entry, name));
}

static void setup(void)
{
    CHECK(mkdtemp(root_dir) && mkdtemp(outside_dir));
    CHECK(chmod(root_dir, 0755) == 0);
    CHECK(mkdir(host("/workspace"), 0755) == 0 && chown(host("/workspace"), USER, USER) == 0);
    CHECK(mkdir(host("/etc"), 0755) == 0);
    write_host_file(host("/etc/passwd"), "sandbox passwd\n", 0644, 0);
    char secret[4200];
    snprintf(secret, sizeof secret, "%s/secret", outside_dir);
    write_host_file(secret, "host secret\n", 0644, 0);
    int root_fd = open(root_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    CHECK(root_fd >= 0);
    confined_init(&c, root_fd, USER, USER);
}

static void test_write_read_stat(void)
{
    bool existed = true;
    CHECK(put("a/b/c.txt", "hello", &existed) == 0);
    CHECK(!existed);
    CHECK_STR(get("/workspace/a/b/c.txt"), "hello");
    struct stat st;
    CHECK(stat(host("/workspace/a/b/c.txt"), &st) == 0 && st.st_uid == USER && st.st_gid == USER);
    CHECK((st.st_mode & 07777) == 0644);
    CHECK(stat(host("/workspace/a/b"), &st) == 0 && st.st_uid == USER && S_ISDIR(st.st_mode));
    CHECK(put("/workspace/a/b/c.txt", "hi", &existed) == 0);
    CHECK(existed);
    CHECK_STR(get("a/./b//c.txt"), "hi");

    json_t *entry = confined_stat(&c, "a/b/c.txt");
    CHECK(entry != NULL);
    CHECK_STR(field(entry, "name"), "c.txt");
    CHECK_STR(field(entry, "path"), "/workspace/a/b/c.txt");
    CHECK_STR(field(entry, "type"), "file");
    CHECK_STR(field(entry, "mode"), "0644");
    CHECK(json_integer_value(json_object_get(entry, "size")) == 2);
    CHECK(strlen(field(entry, "modified_at")) == 27);
    CHECK(json_object_get(entry, "symlink_target") == NULL);
    json_decref(entry);

    entry = confined_stat(&c, "/");
    CHECK_STR(field(entry, "name"), "/");
    CHECK_STR(field(entry, "type"), "dir");
    json_decref(entry);

    CHECK(confined_stat(&c, "a/missing") == NULL && errors_status_of_errno(c.error) == 404);
    CHECK(confined_open_read(&c, "a/b", &st) < 0 && errors_status_of_errno(c.error) == 400);
    CHECK(confined_open_write(&c, "a/b", 0644, &existed) < 0 &&
          errors_status_of_errno(c.error) == 400);
    CHECK(put("a/b/c.txt/d", "x", &existed) < 0 && errors_status_of_errno(c.error) == 409);
}

static void test_list(void)
{
    bool existed;
    CHECK(put("list/z.txt", "z", &existed) == 0 && put("list/d/y.txt", "y", &existed) == 0);
    CHECK(put("list/d/e/x.txt", "x", &existed) == 0 && put("list/a.txt", "a", &existed) == 0);
    json_t *list = confined_list(&c, "list", 1);
    CHECK(json_array_size(list) == 3);
    CHECK_STR(field(json_array_get(list, 0), "path"), "/workspace/list/a.txt");
    CHECK_STR(field(json_array_get(list, 1), "path"), "/workspace/list/d");
    CHECK_STR(field(json_array_get(list, 1), "type"), "dir");
    CHECK_STR(field(json_array_get(list, 2), "path"), "/workspace/list/z.txt");
    json_decref(list);

    list = confined_list(&c, "/workspace/list", 10);
    CHECK(json_array_size(list) == 6);
    const char *previous = "";
    for (size_t i = 0; i < json_array_size(list); i++) {
        const char *path = field(json_array_get(list, i), "path");
        CHECK(strcmp(previous, path) < 0);
        previous = path;
    }
    json_decref(list);

    list = confined_list(&c, "list", 2);
    CHECK(json_array_size(list) == 5); /* d/e/x.txt is three levels down */
    json_decref(list);

    CHECK(confined_list(&c, "list/a.txt", 1) == NULL && errors_status_of_errno(c.error) == 400);
    CHECK(confined_list(&c, "nothing", 1) == NULL && errors_status_of_errno(c.error) == 404);
}

static void test_mkdir(void)
{
    bool existed = true;
    json_t *entry = confined_mkdir(&c, "m/n/o", 0755, &existed);
    CHECK(entry && !existed);
    CHECK_STR(field(entry, "type"), "dir");
    CHECK_STR(field(entry, "path"), "/workspace/m/n/o");
    json_decref(entry);
    struct stat st;
    CHECK(stat(host("/workspace/m/n"), &st) == 0 && st.st_uid == USER);
    entry = confined_mkdir(&c, "m/n", 0755, &existed);
    CHECK(entry && existed);
    json_decref(entry);
    CHECK(put("m/file", "f", &existed) == 0);
    CHECK(confined_mkdir(&c, "m/file", 0755, &existed) == NULL &&
          errors_status_of_errno(c.error) == 409);
    CHECK(confined_mkdir(&c, "m/file/g", 0755, &existed) == NULL &&
          errors_status_of_errno(c.error) == 409);
}

static void test_move(void)
{
    bool existed;
    CHECK(put("mv/x", "moved", &existed) == 0);
    json_t *entry = confined_move(&c, "mv/x", "mv2/deeper/y");
    CHECK(entry != NULL);
    CHECK_STR(field(entry, "path"), "/workspace/mv2/deeper/y");
    json_decref(entry);
    CHECK_STR(get("mv2/deeper/y"), "moved");
    CHECK(get("mv/x") == NULL && errors_status_of_errno(c.error) == 404);
    CHECK(confined_move(&c, "mv/x", "mv/z") == NULL && errors_status_of_errno(c.error) == 404);
    CHECK(confined_move(&c, "mv2", "mv2/inside") == NULL && errors_status_of_errno(c.error) == 400);
    CHECK(confined_move(&c, "/", "elsewhere") == NULL && errors_status_of_errno(c.error) == 409);
}

static void test_remove(void)
{
    bool existed;
    CHECK(put("rm/a/b/c", "c", &existed) == 0 && put("rm/top", "t", &existed) == 0);
    /* A link to a host directory inside the tree: removed as a link, never followed. */
    CHECK(symlink(outside_dir, host("/workspace/rm/a/to-host")) == 0);
    CHECK(mkdir(host("/workspace/keep"), 0755) == 0 &&
          chown(host("/workspace/keep"), USER, USER) == 0);
    CHECK(symlink("/workspace/keep", host("/workspace/rm/keep-link")) == 0);
    CHECK(confined_remove(&c, "rm/keep-link", false) == 0);
    struct stat st;
    CHECK(stat(host("/workspace/keep"), &st) == 0);

    CHECK(confined_remove(&c, "rm", false) < 0 && errors_status_of_errno(c.error) == 409);
    CHECK(confined_remove(&c, "rm/top", false) == 0);
    CHECK(confined_remove(&c, "rm/top", false) < 0 && errors_status_of_errno(c.error) == 404);
    CHECK(confined_remove(&c, "rm", true) == 0);
    CHECK(lstat(host("/workspace/rm"), &st) < 0 && errno == ENOENT);
    char secret[4200];
    snprintf(secret, sizeof secret, "%s/secret", outside_dir);
    CHECK(stat(secret, &st) == 0);
    CHECK(confined_remove(&c, "/", true) < 0 && errors_status_of_errno(c.error) == 409);
}

static void test_dot_dot_refused(void)
{
    static const char *const paths[] = {"..", "../etc/passwd", "a/../../b", "/workspace/..",
                                        "a/.."};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        CHECK(get(paths[i]) == NULL);
        CHECK(c.error == EINVAL && errors_status_of_errno(c.error) == 400);
        CHECK(strstr(c.why, "'..'") != NULL);
    }
    CHECK(confined_stat(&c, "") == NULL && errors_status_of_errno(c.error) == 400);
    char normalized[64];
    CHECK(confined_normalize(&c, "x/.//y/", normalized, sizeof normalized) == 0);
    CHECK_STR(normalized, "/workspace/x/y");
    CHECK(confined_normalize(&c, "///", normalized, sizeof normalized) == 0);
    CHECK_STR(normalized, "/");
    CHECK(confined_normalize(&c, "..foo/.bar", normalized, sizeof normalized) == 0);
    CHECK_STR(normalized, "/workspace/..foo/.bar");
}

static void test_absolute_link_resolves_inside(void)
{
    CHECK(symlink("/etc/passwd", host("/workspace/pw")) == 0);
    CHECK_STR(get("pw"), "sandbox passwd\n");
    json_t *entry = confined_stat(&c, "pw");
    CHECK_STR(field(entry, "type"), "symlink");
    CHECK_STR(field(entry, "symlink_target"), "/etc/passwd");
    json_decref(entry);
    /* Through the link, as the user: the sandbox's root-owned file is not writable. */
    bool existed;
    CHECK(put("pw", "owned", &existed) < 0 && errors_status_of_errno(c.error) == 403);
    CHECK_STR(get("/etc/passwd"), "sandbox passwd\n");
}

static void test_relative_link_cannot_escape(void)
{
    CHECK(symlink("../../../../../../..", host("/workspace/up")) == 0);
    CHECK_STR(get("up/etc/passwd"), "sandbox passwd\n");
    char target[4200];
    snprintf(target, sizeof target, "../../../../../..%s/secret", outside_dir);
    CHECK(symlink(target, host("/workspace/escape")) == 0);
    CHECK(get("escape") == NULL && errors_status_of_errno(c.error) == 404);
    snprintf(target, sizeof target, "%s/secret", outside_dir);
    CHECK(symlink(target, host("/workspace/absolute-escape")) == 0);
    CHECK(get("absolute-escape") == NULL && errors_status_of_errno(c.error) == 404);
    /* Written through, the link lands inside the root (once the target's directory is there). */
    CHECK(fs_mkdir_p(host(outside_dir), 0755) == 0 && chown(host(outside_dir), USER, USER) == 0);
    bool existed;
    CHECK(put("absolute-escape", "written", &existed) == 0);
    CHECK_STR(get(target), "written");
    struct stat st;
    CHECK(stat(host(target), &st) == 0 && st.st_uid == USER);
    CHECK(stat(target, &st) == 0 && st.st_size == 12); /* the host's file is untouched */
}

static void on_alarm(int signal_number)
{
    (void)signal_number;
    const char message[] = "not ok - a confined operation blocked on a FIFO\n";
    (void)!write(1, message, sizeof message - 1);
    _exit(1);
}

static void test_fifo_refused_without_blocking(void)
{
    CHECK(mkfifo(host("/workspace/fifo"), 0666) == 0 &&
          chown(host("/workspace/fifo"), USER, USER) == 0);
    signal(SIGALRM, on_alarm);
    alarm(5);
    struct stat st;
    bool existed;
    CHECK(confined_open_read(&c, "fifo", &st) < 0 && errors_status_of_errno(c.error) == 400);
    CHECK(confined_open_write(&c, "fifo", 0644, &existed) < 0 &&
          errors_status_of_errno(c.error) == 400);
    CHECK(symlink("fifo", host("/workspace/fifo-link")) == 0);
    CHECK(confined_open_read(&c, "fifo-link", &st) < 0 && errors_status_of_errno(c.error) == 400);
    alarm(0);
    json_t *entry = confined_stat(&c, "fifo");
    CHECK_STR(field(entry, "type"), "other");
    json_decref(entry);
}

static void test_kernel_filesystems_refused(void)
{
    static const char *const paths[] = {"/proc/self/environ", "/sys", "/dev/null", "/proc"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        CHECK(get(paths[i]) == NULL && errors_status_of_errno(c.error) == 403);
    CHECK(get("/device") == NULL && errors_status_of_errno(c.error) == 404); /* only whole names */
    /* A walk from above lists /dev but does not enter it. */
    CHECK(mkdir(host("/dev"), 0755) == 0);
    write_host_file(host("/dev/null"), "", 0666, 0);
    json_t *top = confined_list(&c, "/", 3);
    bool saw_dev = false;
    for (size_t i = 0; i < json_array_size(top); i++) {
        const char *path = field(json_array_get(top, i), "path");
        saw_dev = saw_dev || strcmp(path, "/dev") == 0;
        CHECK(strncmp(path, "/dev/", 5) != 0);
    }
    CHECK(saw_dev);
    json_decref(top);
    /* A procfs elsewhere (reached by a link, say) is recognized after resolution. Mounted in a
       private mount namespace, so it cannot outlive the test. */
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mkdir(host("/workspace/kproc"), 0755) < 0 ||
        mount("proc", host("/workspace/kproc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) <
            0) {
        printf("# skipped: cannot mount a procfs here (%s)\n", strerror(errno));
        return;
    }
    /* The old descriptor sees the old namespace's mounts: open the root again in this one. */
    int old_root_fd = c.root_fd;
    c.root_fd = open(root_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    CHECK(symlink("/workspace/kproc", host("/workspace/kproc-link")) == 0);
    /* /proc/self/root would jump to the host's "/", which is no kernel filesystem: only
       RESOLVE_NO_MAGICLINKS stops it. */
    CHECK(symlink("/workspace/kproc/self/root", host("/workspace/magic")) == 0);
    CHECK(get("magic/etc/passwd") == NULL && errors_status_of_errno(c.error) == 403);
    CHECK(get("kproc/self/root/etc/passwd") == NULL && errors_status_of_errno(c.error) == 403);
    CHECK(get("kproc/self/status") == NULL && errors_status_of_errno(c.error) == 403);
    CHECK(get("kproc-link/self/status") == NULL && errors_status_of_errno(c.error) == 403);
    CHECK(confined_list(&c, "kproc-link", 1) == NULL && errors_status_of_errno(c.error) == 403);
    json_t *list = confined_list(&c, "/workspace", 2);
    for (size_t i = 0; i < json_array_size(list); i++)
        CHECK(strncmp(field(json_array_get(list, i), "path"), "/workspace/kproc/", 17) != 0);
    json_decref(list);
    close(c.root_fd);
    c.root_fd = old_root_fd;
    CHECK(umount2(host("/workspace/kproc"), MNT_DETACH) == 0);
}

static void test_permissions_are_the_users(void)
{
    write_host_file(host("/workspace/root-only"), "secret", 0600, 0);
    CHECK(get("root-only") == NULL && errors_status_of_errno(c.error) == 403);
    CHECK(mkdir(host("/workspace/root-dir"), 0755) == 0);
    bool existed;
    CHECK(put("root-dir/x", "x", &existed) < 0 && errors_status_of_errno(c.error) == 403);
    CHECK(confined_remove(&c, "root-only", false) == 0); /* the user owns /workspace */
    /* The daemon's own identity is back after each operation. */
    CHECK(setfsuid((uid_t)-1) == 0 && setfsgid((gid_t)-1) == 0);
    CHECK(c.user_depth == 0);
    CHECK(access(host("/workspace/root-dir"), W_OK) == 0);
    /* A sandbox user of 0 would keep root's powers: refused outright. */
    confined as_root;
    confined_init(&as_root, c.root_fd, 0, 0);
    CHECK(confined_stat(&as_root, "a") == NULL && errors_status_of_errno(as_root.error) == 403);
}

static int create_tmpfile(void)
{
    int fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    return fd;
}

static void test_tar_round_trip(void)
{
    bool existed;
    CHECK(put("tarsrc/a.txt", "alpha", &existed) == 0 &&
          put("tarsrc/sub/b.sh", "beta", &existed) == 0);
    CHECK(chmod(host("/workspace/tarsrc/sub/b.sh"), 0755) == 0);
    CHECK(symlink("a.txt", host("/workspace/tarsrc/link")) == 0);
    CHECK(symlink("/etc", host("/workspace/tarsrc/etc-link")) == 0);
    CHECK(mkfifo(host("/workspace/tarsrc/fifo"), 0644) == 0);
    int fd = create_tmpfile();
    CHECK(confined_tar_create(&c, "tarsrc", fd, 1LL << 30) == 0);
    CHECK(lseek(fd, 0, SEEK_END) >= 2048);
    CHECK(confined_tar_extract(&c, "tardst", fd) == 0);
    close(fd);
    CHECK_STR(get("tardst/a.txt"), "alpha");
    CHECK_STR(get("tardst/sub/b.sh"), "beta");
    struct stat st;
    CHECK(stat(host("/workspace/tardst/sub/b.sh"), &st) == 0 && (st.st_mode & 07777) == 0755);
    CHECK(st.st_uid == USER);
    char target[64] = {0};
    CHECK(readlink(host("/workspace/tardst/link"), target, sizeof target - 1) == 5);
    CHECK_STR(target, "a.txt");
    CHECK(lstat(host("/workspace/tardst/etc-link"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(lstat(host("/workspace/tardst/fifo"), &st) < 0 && errno == ENOENT);
    CHECK(confined_tar_create(&c, "tarsrc/a.txt", create_tmpfile(), 1LL << 30) < 0 &&
          errors_status_of_errno(c.error) == 400);
}

typedef struct tar_member {
    const char *name;
    mode_t type, perm;
    const char *content, *link;
    bool hardlink;
} tar_member;

static int make_tar(const tar_member *members, size_t count)
{
    int fd = create_tmpfile();
    struct archive *archive = archive_write_new();
    archive_write_set_format_pax_restricted(archive);
    archive_write_open_fd(archive, fd);
    for (size_t i = 0; i < count; i++) {
        struct archive_entry *entry = archive_entry_new();
        archive_entry_set_pathname(entry, members[i].name);
        archive_entry_set_filetype(entry, members[i].type);
        archive_entry_set_perm(entry, members[i].perm);
        if (members[i].hardlink)
            archive_entry_set_hardlink(entry, members[i].link);
        else if (members[i].link)
            archive_entry_set_symlink(entry, members[i].link);
        size_t size = members[i].content ? strlen(members[i].content) : 0;
        archive_entry_set_size(entry, (la_int64_t)size);
        archive_write_header(archive, entry);
        if (size)
            archive_write_data(archive, members[i].content, size);
        archive_entry_free(entry);
    }
    archive_write_close(archive);
    archive_write_free(archive);
    return fd;
}

static void expect_refused(const tar_member *members, size_t count, const char *named)
{
    int fd = make_tar(members, count);
    CHECK(confined_tar_extract(&c, "hostile", fd) < 0);
    CHECK(errors_status_of_errno(c.error) == 400);
    CHECK(strstr(c.why, named) != NULL);
    close(fd);
    struct stat st; /* checked before anything is written */
    CHECK(lstat(host("/workspace/hostile"), &st) < 0 && errno == ENOENT);
}

static void test_tar_hostile_entries(void)
{
    const tar_member dot_dot[] = {{"fine.txt", AE_IFREG, 0644, "ok", NULL, false},
                                  {"sub/../../evil", AE_IFREG, 0644, "evil", NULL, false}};
    expect_refused(dot_dot, 2, "'sub/../../evil'");
    const tar_member absolute[] = {{"/etc/evil", AE_IFREG, 0644, "evil", NULL, false}};
    expect_refused(absolute, 1, "'/etc/evil'");
    const tar_member hardlink[] = {{"fine.txt", AE_IFREG, 0644, "ok", NULL, false},
                                   {"hard", AE_IFREG, 0644, NULL, "/etc/passwd", true}};
    expect_refused(hardlink, 2, "hard link");
    const tar_member device[] = {{"null", AE_IFCHR, 0666, NULL, NULL, false}};
    expect_refused(device, 1, "character device");
    const tar_member fifo[] = {{"pipe", AE_IFIFO, 0666, NULL, NULL, false}};
    expect_refused(fifo, 1, "FIFO");

    int fd = create_tmpfile();
    CHECK(write(fd, "this is not a tar archive, just some text", 41) == 41);
    CHECK(confined_tar_extract(&c, "hostile", fd) < 0 && errors_status_of_errno(c.error) == 400);
    close(fd);

    /* Special bits are stripped; a link planted by the archive leads inside the sandbox only. */
    const tar_member sneaky[] = {{"suid", AE_IFREG, 06755, "#!/bin/sh\n", NULL, false},
                                 {"etc", AE_IFLNK, 0777, NULL, "/etc", false},
                                 {"etc/passwd", AE_IFREG, 0644, "pwned", NULL, false}};
    fd = make_tar(sneaky, 3);
    CHECK(confined_tar_extract(&c, "sneaky", fd) < 0 && errors_status_of_errno(c.error) == 403);
    close(fd);
    struct stat st;
    CHECK(stat(host("/workspace/sneaky/suid"), &st) == 0 && (st.st_mode & 07777) == 0755);
    CHECK_STR(get("/etc/passwd"), "sandbox passwd\n");
    CHECK(stat("/etc/passwd", &st) == 0 && st.st_size > 0);
}

static void test_status_mapping(void)
{
    CHECK(errors_status_of_errno(ENOENT) == 404);
    CHECK(errors_status_of_errno(EACCES) == 403 && errors_status_of_errno(EPERM) == 403);
    CHECK(errors_status_of_errno(EROFS) == 403 && errors_status_of_errno(EXDEV) == 403);
    CHECK(errors_status_of_errno(ELOOP) == 403);
    CHECK(errors_status_of_errno(ENOTDIR) == 400 && errors_status_of_errno(EISDIR) == 400);
    CHECK(errors_status_of_errno(EINVAL) == 400);
    CHECK(errors_status_of_errno(ENOTEMPTY) == 409 && errors_status_of_errno(EEXIST) == 409);
    CHECK(errors_status_of_errno(ENOSPC) == 507 && errors_status_of_errno(EDQUOT) == 507);
    CHECK(errors_status_of_errno(EFBIG) == 413);
    CHECK(errors_status_of_errno(EIO) == 500);
}

/* Writes `text` and the metadata given as JSON text to `path`: confined_set_metadata's result. */
static int put_with_metadata(const char *path, const char *text, const char *metadata_json)
{
    bool existed;
    char full[4096];
    CHECK(confined_normalize(&c, path, full, sizeof full) == 0);
    int fd = confined_open_write(&c, full, 0644, &existed);
    CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    json_t *metadata = json_loads(metadata_json, 0, NULL);
    int rc = confined_set_metadata(&c, fd, full, metadata);
    json_decref(metadata);
    close(fd);
    return rc;
}

static const char *metadata_value(json_t *entry, const char *key)
{
    return json_string_value(json_object_get(json_object_get(entry, "metadata"), key));
}

static void test_metadata_round_trip(void)
{
    CHECK(put_with_metadata("meta/a.txt", "a", "{\"author\": \"ann\", \"purpose\": \"test\"}") ==
          0);
    char value[64] = "";
    CHECK(getxattr(host("/workspace/meta/a.txt"), "user.e2b.author", value, sizeof value) == 3);
    CHECK(memcmp(value, "ann", 3) == 0);
    json_t *entry = confined_stat(&c, "meta/a.txt");
    CHECK_STR(metadata_value(entry, "author"), "ann");
    CHECK_STR(metadata_value(entry, "purpose"), "test");
    json_decref(entry);
    json_t *list = confined_list(&c, "meta", 1);
    CHECK_STR(metadata_value(json_array_get(list, 0), "author"), "ann");
    json_decref(list);

    /* an overwrite replaces the whole set; an empty set clears it, and no key is left */
    CHECK(put_with_metadata("meta/a.txt", "b", "{\"author\": \"bob\"}") == 0);
    entry = confined_stat(&c, "meta/a.txt");
    CHECK_STR(metadata_value(entry, "author"), "bob");
    CHECK(json_object_size(json_object_get(entry, "metadata")) == 1);
    json_decref(entry);
    CHECK(put_with_metadata("meta/a.txt", "c", "{}") == 0);
    entry = confined_stat(&c, "meta/a.txt");
    CHECK(entry && json_object_get(entry, "metadata") == NULL);
    json_decref(entry);

    /* attributes outside user.e2b. (other tools' own) are neither shown nor removed */
    CHECK(setxattr(host("/workspace/meta/a.txt"), "user.other", "kept", 4, 0) == 0);
    CHECK(put_with_metadata("meta/a.txt", "d", "{\"k\": \"v\"}") == 0);
    entry = confined_stat(&c, "meta/a.txt");
    CHECK(json_object_size(json_object_get(entry, "metadata")) == 1);
    json_decref(entry);
    CHECK(getxattr(host("/workspace/meta/a.txt"), "user.other", value, sizeof value) == 4);
}

static void test_metadata_limits(void)
{
    char json[8192], key[300];
    CHECK(put_with_metadata("meta/l.txt", "x", "{\"bad key\": \"v\"}") < 0);
    CHECK(c.error == EINVAL && strstr(c.why, "'bad key' is not an HTTP token"));
    CHECK(put_with_metadata("meta/l.txt", "x", "{\"k\": \"caf\\u00e9\"}") < 0);
    CHECK(c.error == EINVAL && strstr(c.why, "printable ASCII"));
    memset(key, 'k', 247);
    key[247] = '\0';
    snprintf(json, sizeof json, "{\"%s\": \"v\"}", key);
    CHECK(put_with_metadata("meta/l.txt", "x", json) < 0);
    CHECK(c.error == EINVAL && strstr(c.why, "is 247 bytes; keys are at most 246"));
    key[246] = '\0'; /* the longest key is stored */
    snprintf(json, sizeof json, "{\"%s\": \"v\"}", key);
    CHECK(put_with_metadata("meta/l.txt", "x", json) == 0);
    char big[4097];
    memset(big, 'v', 4096);
    big[4096] = '\0';
    snprintf(json, sizeof json, "{\"k\": \"%s\"}", big);
    CHECK(put_with_metadata("meta/l.txt", "x", json) < 0);
    CHECK(c.error == EINVAL && strstr(c.why, "a file holds at most 4096"));
    CHECK(errors_status_of_errno(c.error) == 400);
}

/* A link the sandbox plants towards a host file never makes the daemon read or set the host
   file's attributes: stat and list show the link (no metadata), and metadata written through
   it lands on a file inside the root. */
static void test_metadata_never_reaches_host(void)
{
    char host_file[4200], target[4200], value[64];
    snprintf(host_file, sizeof host_file, "%s/tagged", outside_dir);
    write_host_file(host_file, "host file\n", 0644, 0);
    CHECK(setxattr(host_file, "user.e2b.owner", "host", 4, 0) == 0);
    snprintf(target, sizeof target, "../../../../../../..%s/tagged", outside_dir);
    CHECK(mkdir(host("/workspace/plant"), 0755) == 0 &&
          chown(host("/workspace/plant"), USER, USER) == 0);
    CHECK(symlink(target, host("/workspace/plant/relative")) == 0);
    CHECK(symlink(host_file, host("/workspace/plant/absolute")) == 0);
    CHECK(symlink(outside_dir, host("/workspace/plant/dir")) == 0);

    json_t *entry = confined_stat(&c, "plant/relative");
    CHECK(entry && json_object_get(entry, "metadata") == NULL);
    json_decref(entry);
    json_t *list = confined_list(&c, "plant", 2);
    CHECK(json_array_size(list) == 3);
    for (size_t i = 0; i < json_array_size(list); i++)
        CHECK(json_object_get(json_array_get(list, i), "metadata") == NULL);
    json_decref(list);

    /* written through: the file appears inside the root (or the write is refused) */
    int rc = put_with_metadata("plant/absolute", "x", "{\"owner\": \"sandbox\"}");
    CHECK(rc == 0 || c.error == ENOENT);
    CHECK(getxattr(host_file, "user.e2b.owner", value, sizeof value) == 4);
    CHECK(memcmp(value, "host", 4) == 0);
    char names[256];
    CHECK(listxattr(host_file, names, sizeof names) == (ssize_t)sizeof "user.e2b.owner");
    struct stat st;
    CHECK(stat(host_file, &st) == 0 && st.st_size == 10 && st.st_uid == 0);
}

int main(void)
{
    if (geteuid() != 0) {
        printf("# skipped: confined operations switch to another user, which needs root\n");
        return 0;
    }
    setup();
    RUN(test_write_read_stat);
    RUN(test_list);
    RUN(test_mkdir);
    RUN(test_move);
    RUN(test_remove);
    RUN(test_dot_dot_refused);
    RUN(test_absolute_link_resolves_inside);
    RUN(test_relative_link_cannot_escape);
    RUN(test_fifo_refused_without_blocking);
    RUN(test_kernel_filesystems_refused);
    RUN(test_permissions_are_the_users);
    RUN(test_tar_round_trip);
    RUN(test_tar_hostile_entries);
    RUN(test_status_mapping);
    RUN(test_metadata_round_trip);
    RUN(test_metadata_limits);
    RUN(test_metadata_never_reaches_host);
    close(c.root_fd);
    CHECK(fs_remove_tree(root_dir) == 0 && fs_remove_tree(outside_dir) == 0);
    return check_summary("confined");
}
