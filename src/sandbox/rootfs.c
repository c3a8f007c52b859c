#include "sandbox/rootfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <linux/types.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* getdents64's record (glibc has no header for it before 2.30's getdents64(3) wrapper). */
struct linux_dirent64 {
    __u64 d_ino;
    __s64 d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

#define RO_FLAGS (MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)

/* Host files and directories the sandbox may read: the dynamic loader's cache, certificates,
   fonts, alternatives, Python's and matplotlib's Debian configuration, R's (/usr/lib/R/etc links
   there: R cannot start without its ldpaths and Renviron). Never /etc/ssl/private,
   /etc/shadow, or anything with secrets. */
static const char *const host_etc_entries[] = {
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl/certs", "ca-certificates",
    "ca-certificates.conf", "fonts", "alternatives", "matplotlibrc", "localtime", "mime.types",
    "python3", "python3.11", "bash.bashrc", "profile", "inputrc", "gai.conf", "protocols",
    "services", "magic", "papersize", "R",
};

/* /proc entries that expose the host kernel (Docker's masked and read-only lists). */
/* Debian's python3.11 reads this (its /usr/lib/python3.11/sitecustomize.py links here); relative
   to the new root, inside the "python3.11" entry above. */
#define DEBIAN_SITECUSTOMIZE "etc/python3.11/sitecustomize.py"

static const char *const proc_masked[] = {"kcore", "keys", "timer_list", "sched_debug",
                                          "sysrq-trigger", "latency_stats", "kallsyms", "kmsg"};
static const char *const proc_readonly[] = {"sys", "irq", "bus", "fs", "asound", "acpi", "scsi"};

static const char *const device_nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};

static int fail(char *why, size_t why_size, const char *what, const char *path)
{
    snprintf(why, why_size, "%s %s: %s", what, path, strerror(errno));
    return -1;
}

static int make_file(const char *path, const char *content)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -1;
    size_t n = content ? strlen(content) : 0;
    ssize_t written = n ? write(fd, content, n) : 0;
    close(fd);
    return written == (ssize_t)n ? 0 : -1;
}

static int make_dirs(const char *path)
{
    char partial[4096];
    snprintf(partial, sizeof partial, "%s", path);
    for (char *p = partial + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(partial, 0755) < 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    return mkdir(partial, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

/* Binds a host path (nosuid, nodev, and read-only unless `writable`) at `target`, creating the
   mount point. */
static int bind_path(const char *source, const char *target, bool recursive, bool writable)
{
    struct stat st;
    if (stat(source, &st) < 0)
        return errno == ENOENT ? 0 : -1; /* optional entries may be missing */
    if (S_ISDIR(st.st_mode) ? make_dirs(target) < 0 : make_file(target, NULL) < 0)
        return -1;
    if (mount(source, target, NULL, MS_BIND | (recursive ? MS_REC : 0), NULL) < 0)
        return -1;
    return mount(NULL, target, NULL, writable ? RO_FLAGS & ~MS_RDONLY : RO_FLAGS, NULL);
}

static int bind_readonly(const char *source, const char *target, bool recursive)
{
    return bind_path(source, target, recursive, false);
}

static bool has_template(const rootfs_spec *spec)
{
    return spec->template && spec->template->view;
}

/* Where the sandbox's /usr and /etc entries come from: the host's, or the template's view (its
   /etc only for an imported root filesystem, which brings one). */
static void root_source(const rootfs_spec *spec, const char *top, char *out, size_t out_size)
{
    struct stat st;
    if (has_template(spec)) {
        snprintf(out, out_size, "%s/%s", spec->template->view, top);
        if (strcmp(top, "usr") == 0 || (lstat(out, &st) == 0 && S_ISDIR(st.st_mode)))
            return;
    }
    snprintf(out, out_size, "/%s", top);
}

static int write_identity_files(const rootfs_spec *spec)
{
    char passwd[512], group[256];
    snprintf(passwd, sizeof passwd,
             "root:x:0:0:root:/root:/usr/sbin/nologin\n"
             "user:x:%u:%u:cellbox sandbox:" ROOTFS_HOME ":/bin/bash\n"
             "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
             spec->uid, spec->gid);
    snprintf(group, sizeof group, "root:x:0:\nuser:x:%u:\nnogroup:x:65534:\n", spec->gid);
    if (make_file("etc/passwd", passwd) < 0 || make_file("etc/group", group) < 0 ||
        make_file("etc/hostname", "cellbox\n") < 0 ||
        make_file("etc/hosts", "127.0.0.1 localhost cellbox\n::1 localhost ip6-localhost\n") < 0 ||
        make_file("etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n") < 0)
        return -1;
    /* The host's resolv.conf would name resolvers the sandbox cannot reach (the host's loopback,
       private addresses): a networked sandbox asks its gateway, where the daemon's resolver
       answers. The root is the same with network or without, so that one warm-pool kernel
       serves both kinds: without an interface the gateway has no route, and a lookup fails at
       once (ENETUNREACH), never waiting on a timeout. */
    char resolv_conf[64] = "";
    if (spec->nameserver && *spec->nameserver)
        snprintf(resolv_conf, sizeof resolv_conf, "nameserver %s\n", spec->nameserver);
    return make_file("etc/resolv.conf", resolv_conf);
}

/* pip's site-wide configuration. The sandbox's /usr is the host's, read-only: pip can only ever
   write to the user's site ($HOME/.local, in the workspace), which it chooses by itself when
   site-packages is not writable. Debian's PEP 668 marker would refuse even that
   (externally-managed-environment), though it guards only the /usr a sandbox cannot change. With
   no network, every index is out of reach: no retries (pip would back off for seconds), no
   check for a newer pip; the sitecustomize below says so to pip at run time (PIP_RETRIES and
   friends), since the root is the same with network or without. */
static int write_pip_config(void)
{
    return make_file("etc/pip.conf", "[global]\nbreak-system-packages = true\n");
}

/* cellbox's sitecustomize (runtime/python, which does what Debian's does, then, in a pip process
   of a sandbox that has no interface but loopback, watches pip) replaces Debian's: pip alone
   answers an unreachable index with "No matching distribution found", which reads as a misspelt
   name; pip's last line then says the sandbox has no network and what to do instead. It is bound
   in every sandbox and looks at the interfaces when pip starts: a warm-pool kernel is built
   before anyone knows whether it will get a network, and a networked sandbox whose denyOut
   refuses the index must not be told that it has none. Nothing is bound where the host has no
   sitecustomize to replace (the mount point could not be made in the read-only /etc). */
static int bind_no_network_sitecustomize(const rootfs_spec *spec)
{
    if (access(DEBIAN_SITECUSTOMIZE, F_OK) < 0)
        return 0;
    char source[4096];
    snprintf(source, sizeof source, "%s/share/cellbox/python/no_network_sitecustomize.py",
             spec->runtime_dir);
    if (access(source, R_OK) < 0)
        return 0; /* a runtime without it: pip still works, only without the last line */
    /* Mounted over the existing file, never opened for writing: it is the host's. */
    if (mount(source, DEBIAN_SITECUSTOMIZE, NULL, MS_BIND, NULL) < 0)
        return -1;
    return mount(NULL, DEBIAN_SITECUSTOMIZE, NULL, RO_FLAGS, NULL);
}

/* Login shells (E2B's commands run `bash -l -c`) take PATH from the host's /etc/profile, which
   then reads /etc/profile.d: the user's own programs (pip's console scripts) come first there
   too, as in the environment the daemon gives (kernel.c). */
static int write_profile_path(void)
{
    if (make_dirs("etc/profile.d") < 0)
        return -1;
    return make_file("etc/profile.d/cellbox-user-programs.sh",
                     "case \":$PATH:\" in\n"
                     "*\":$HOME/.local/bin:\"*) ;;\n"
                     "*) PATH=\"$HOME/.local/bin:$PATH\" ;;\n"
                     "esac\n");
}

static int build_etc(const rootfs_spec *spec, char *why, size_t why_size)
{
    if (make_dirs("etc") < 0 || write_identity_files(spec) < 0 || write_pip_config() < 0 ||
        write_profile_path() < 0)
        return fail(why, why_size, "cannot write", "/etc");
    char etc[4096];
    root_source(spec, "etc", etc, sizeof etc);
    for (size_t i = 0; i < sizeof host_etc_entries / sizeof host_etc_entries[0]; i++) {
        char source[4200], target[256];
        snprintf(source, sizeof source, "%s/%s", etc, host_etc_entries[i]);
        snprintf(target, sizeof target, "etc/%s", host_etc_entries[i]);
        if (bind_readonly(source, target, true) < 0)
            return fail(why, why_size, "cannot bind", source);
    }
    if (bind_no_network_sitecustomize(spec) < 0)
        return fail(why, why_size, "cannot bind", DEBIAN_SITECUSTOMIZE);
    return 0;
}

/* /usr read-only (the host's, or the template's view of its layers over it); Debian is
   merged-usr, so /bin, /lib... are links into it. A build step's view is writable: only the
   directories its new layer made for the build user can be written, and the writes land in
   that layer (the overlay's upper directory), never in the base. */
static int build_usr(const rootfs_spec *spec, char *why, size_t why_size)
{
    static const char *const links[][2] = {{"bin", "bin"}, {"sbin", "sbin"},
                                           {"lib", "lib"}, {"lib64", "lib64"},
                                           {"lib32", "lib32"}, {"libx32", "libx32"}};
    char usr[4096];
    root_source(spec, "usr", usr, sizeof usr);
    bool writable = has_template(spec) && spec->template->writable;
    if (bind_path(usr, "usr", true, writable) < 0)
        return fail(why, why_size, "cannot bind", usr);
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        char target[4200], link_target[64];
        snprintf(target, sizeof target, "%s/%s", usr, links[i][1]);
        snprintf(link_target, sizeof link_target, "usr/%s", links[i][1]);
        if (access(target, F_OK) == 0 && symlink(link_target, links[i][0]) < 0)
            return fail(why, why_size, "cannot link", links[i][0]);
    }
    return 0;
}

/* Top-level names a template's view never replaces: the root builds them itself (or they are
   merged-usr links), and /home/user is the workspace. */
static bool is_reserved_top_level(const char *name)
{
    static const char *const reserved[] = {"usr", "etc", "home", "root", "dev", "proc", "sys",
                                           "tmp", "run", "workspace", "bin", "sbin", "lib",
                                           "lib32", "lib64", "libx32", "boot", "mnt", "media",
                                           "lost+found", ".oldroot"};
    if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])))
        return true;
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (strcmp(name, reserved[i]) == 0)
            return true;
    return false;
}

/* Every other top-level directory of the template's view (opt, app, srv, ...) at /NAME:
   read-only, or read-write for a build step (then also listed for Landlock in `writable`, the
   volume list's buffer). The view's opt always holds an empty opt/cellbox, where the runtime is
   bound next. */
static int bind_template_directories(const rootfs_spec *spec, char *writable, size_t writable_size,
                                     char *why, size_t why_size)
{
    if (!has_template(spec))
        return 0;
    /* getdents64 into the stack, not opendir: a zygote's clone shares its memory (sandbox.h) and
       must not allocate. */
    int view = open(spec->template->view, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (view < 0)
        return fail(why, why_size, "cannot open the template's view", spec->template->view);
    _Alignas(8) char entries[4096];
    size_t used = strlen(writable);
    if (spec->template->writable) /* build_usr bound it writable: the step's pip writes there */
        used += (size_t)snprintf(writable + used, writable_size - used, "/usr\n");
    long n;
    while ((n = syscall(SYS_getdents64, view, entries, sizeof entries)) > 0) {
        for (long at = 0; at < n;) {
            const struct linux_dirent64 *entry = (const void *)(entries + at);
            at += entry->d_reclen;
            struct stat st;
            if (is_reserved_top_level(entry->d_name) ||
                fstatat(view, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
                continue;
            char source[4200];
            snprintf(source, sizeof source, "%s/%s", spec->template->view, entry->d_name);
            if (bind_path(source, entry->d_name, true, spec->template->writable) < 0) {
                close(view);
                return fail(why, why_size, "cannot bind the template's", source);
            }
            if (spec->template->writable && used < writable_size)
                used += (size_t)snprintf(writable + used, writable_size - used, "/%s\n",
                                         entry->d_name);
        }
    }
    close(view);
    return n < 0 ? fail(why, why_size, "cannot read the template's view", spec->template->view) : 0;
}

/* A small /dev: the harmless nodes bound from the host, a private devpts instance (its own
   ptys, none of the host's), a /dev/shm tmpfs. */
static int build_dev(const rootfs_spec *spec, char *why, size_t why_size)
{
    if (make_dirs("dev") < 0 || mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k") < 0)
        return fail(why, why_size, "cannot mount", "/dev");
    for (size_t i = 0; i < sizeof device_nodes / sizeof device_nodes[0]; i++) {
        char source[64], target[64];
        snprintf(source, sizeof source, "/dev/%s", device_nodes[i]);
        snprintf(target, sizeof target, "dev/%s", device_nodes[i]);
        if (make_file(target, NULL) < 0 || mount(source, target, NULL, MS_BIND, NULL) < 0)
            return fail(why, why_size, "cannot bind", source);
    }
    char shm_options[64];
    snprintf(shm_options, sizeof shm_options, "mode=1777,size=%lld", spec->tmp_bytes);
    if (make_dirs("dev/pts") < 0 ||
        mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=0620") < 0)
        return fail(why, why_size, "cannot mount", "/dev/pts");
    if (make_dirs("dev/shm") < 0 ||
        mount("tmpfs", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, shm_options) < 0)
        return fail(why, why_size, "cannot mount", "/dev/shm");
    if (symlink("pts/ptmx", "dev/ptmx") < 0 || symlink("/proc/self/fd", "dev/fd") < 0 ||
        symlink("/proc/self/fd/0", "dev/stdin") < 0 || symlink("/proc/self/fd/1", "dev/stdout") < 0 ||
        symlink("/proc/self/fd/2", "dev/stderr") < 0)
        return fail(why, why_size, "cannot link", "/dev entries");
    return mount(NULL, "dev", NULL, MS_REMOUNT | MS_NOSUID | MS_NOEXEC | MS_RDONLY, "mode=0755,size=64k") < 0
               ? fail(why, why_size, "cannot seal", "/dev")
               : 0;
}

/* A fresh /proc of the sandbox's pid namespace, with the host-kernel views masked. */
static int build_proc(char *why, size_t why_size)
{
    if (make_dirs("proc") < 0 || mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        return fail(why, why_size, "cannot mount", "/proc");
    for (size_t i = 0; i < sizeof proc_masked / sizeof proc_masked[0]; i++) {
        char target[64];
        snprintf(target, sizeof target, "proc/%s", proc_masked[i]);
        if (access(target, F_OK) == 0 && mount("/dev/null", target, NULL, MS_BIND, NULL) < 0)
            return fail(why, why_size, "cannot mask", target);
    }
    for (size_t i = 0; i < sizeof proc_readonly / sizeof proc_readonly[0]; i++) {
        char target[64];
        snprintf(target, sizeof target, "proc/%s", proc_readonly[i]);
        if (access(target, F_OK) == 0 &&
            (mount(target, target, NULL, MS_BIND | MS_REC, NULL) < 0 ||
             mount(NULL, target, NULL, RO_FLAGS, NULL) < 0))
            return fail(why, why_size, "cannot make read-only", target);
    }
    return 0;
}

/* The workspace bound read-write (but nosuid, nodev) at `target`, made first. */
static int bind_workspace(const char *workspace, const char *target)
{
    if (make_dirs(target) < 0 || mount(workspace, target, NULL, MS_BIND, NULL) < 0)
        return -1;
    return mount(NULL, target, NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV, NULL);
}

/* A build step's home is its view's home/user (the new layer's, for the build user), so what
   the step leaves there becomes the template's home seed; every other sandbox's home is its
   workspace. */
static int bind_home(const rootfs_spec *spec, char *writable, size_t writable_size)
{
    char home[4200];
    struct stat st;
    if (has_template(spec) && spec->template->writable) {
        snprintf(home, sizeof home, "%s%s", spec->template->view, ROOTFS_HOME);
        if (lstat(home, &st) == 0 && S_ISDIR(st.st_mode)) {
            size_t used = strlen(writable);
            if (used < writable_size)
                snprintf(writable + used, writable_size - used, "%s\n", ROOTFS_HOME);
            return bind_workspace(home, &ROOTFS_HOME[1]);
        }
    }
    /* The same directory again as the user's home, where E2B's SDKs and tutorials put files and
       /etc/passwd points: one writable place under two names, so /v1's /workspace and E2B's
       /home/user see the same files and nothing else becomes writable. */
    return bind_workspace(spec->workspace, &ROOTFS_HOME[1]); /* "home/user": relative */
}

static int build_writable(const rootfs_spec *spec, char *writable, size_t writable_size, char *why,
                          size_t why_size)
{
    char tmp_options[64];
    snprintf(tmp_options, sizeof tmp_options, "mode=1777,size=%lld", spec->tmp_bytes);
    if (make_dirs("tmp") < 0 || mount("tmpfs", "tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp_options) < 0)
        return fail(why, why_size, "cannot mount", "/tmp");
    if (bind_workspace(spec->workspace, "workspace") < 0)
        return fail(why, why_size, "cannot bind", spec->workspace);
    if (bind_home(spec, writable, writable_size) < 0)
        return fail(why, why_size, "cannot bind the home at", ROOTFS_HOME);
    if (bind_readonly(spec->runtime_dir, "opt/cellbox", true) < 0)
        return fail(why, why_size, "cannot bind", spec->runtime_dir);
    return 0;
}

/* Each named volume at its path, then the list Landlock reads: the volumes' paths, and a build
   step's writable template directories (`writable`). The paths were checked where the request
   came in (absolute, normalized, none of the root's own mounts), so each mount point is a new
   directory in the root's tmpfs, made here before the root turns read-only. The bind is
   remounted nosuid and nodev: a setuid binary written into a volume by one sandbox never runs
   as root in another. */
static int bind_volumes(const rootfs_spec *spec, const char *writable, char *why, size_t why_size)
{
    char list[ROOTFS_MAX_VOLUMES * (ROOTFS_VOLUME_PATH_MAX + 1) + 1];
    size_t used = (size_t)snprintf(list, sizeof list, "%s", writable);
    int count = spec->volumes ? spec->volumes->count : 0;
    for (int i = 0; i < count && i < ROOTFS_MAX_VOLUMES; i++) {
        const rootfs_volume *v = &spec->volumes->mount[i];
        const char *target = v->path + 1; /* relative to the new root, our cwd */
        if (make_dirs(target) < 0 || mount(v->host, target, NULL, MS_BIND, NULL) < 0 ||
            mount(NULL, target, NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV, NULL) < 0)
            return fail(why, why_size, "cannot bind the volume at", v->path);
        if (used < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s\n", v->path);
    }
    return used > 0 && make_file(&ROOTFS_VOLUME_LIST[1], list) < 0 /* relative: no '/' */
               ? fail(why, why_size, "cannot write", ROOTFS_VOLUME_LIST)
               : 0;
}

int rootfs_enter(const rootfs_spec *spec, char *why, size_t why_size)
{
    /* Nothing mounted from here on may propagate back to the host (the runc/bubblewrap step). */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return fail(why, why_size, "cannot make private", "/");
    if (mount("tmpfs", spec->mount_point, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") < 0 ||
        chdir(spec->mount_point) < 0)
        return fail(why, why_size, "cannot mount the root on", spec->mount_point);
    char writable[1024] = ""; /* a build step's template directories, for Landlock */
    if (build_usr(spec, why, why_size) < 0 || build_etc(spec, why, why_size) < 0 ||
        bind_template_directories(spec, writable, sizeof writable, why, why_size) < 0 ||
        build_dev(spec, why, why_size) < 0 || build_proc(why, why_size) < 0 ||
        build_writable(spec, writable, sizeof writable, why, why_size) < 0 ||
        bind_volumes(spec, writable, why, why_size) < 0)
        return -1;
    if (make_dirs(".oldroot") < 0 || make_dirs("root") < 0 || make_dirs("home") < 0)
        return fail(why, why_size, "cannot create", "mount points");
    /* pivot_root, then detach the old root: the host's tree is gone from this namespace. */
    if (syscall(SYS_pivot_root, ".", ".oldroot") < 0)
        return fail(why, why_size, "pivot_root into", spec->mount_point);
    if (chdir("/") < 0 || umount2("/.oldroot", MNT_DETACH) < 0 || rmdir("/.oldroot") < 0)
        return fail(why, why_size, "cannot detach", "the host root");
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
        return fail(why, why_size, "cannot make read-only", "/");
    if (chdir("/workspace") < 0)
        return fail(why, why_size, "cannot enter", "/workspace");
    return 0;
}
