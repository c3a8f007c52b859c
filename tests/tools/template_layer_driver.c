/* template-layer-driver — one build step the way part BUILD's builder runs it, without the
 * daemon: a layer begun (templates_layer_begin), a writable build view over `lowers` with it as
 * the upper directory (templates_mount_build_view), a shell command run in a sandbox with that
 * view (sandbox_start, rootfs_template writable), the view unmounted and the layer committed
 * (templates_layer_commit). Driven by tests/integration/test_templates_store.py.
 *
 * usage: template-layer-driver DATA_DIR KEY UID WORKSPACE RUNTIME_DIR COMMAND [LOWER...]
 * Prints "exit N" and then "committed" or "refused: why"; exit status 0 when it got that far. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/template_views.h"
#include "model/templates.h"
#include "sandbox/sandbox.h"
#include "sandbox/seccomp_filter.h"

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: %s DATA_DIR KEY UID WORKSPACE RUNTIME_DIR COMMAND [LOWER...]\n",
                argv[0]);
        return 2;
    }
    const char *data_dir = argv[1], *key = argv[2], *workspace = argv[4], *runtime = argv[5];
    uid_t uid = (uid_t)atoi(argv[3]);
    char why[1024], layer[4096], mount_dir[4200], root[4200];
    if (template_views_init(data_dir) < 0 || seccomp_filter_prepare() < 0) {
        fprintf(stderr, "cannot prepare: %s\n", strerror(errno));
        return 1;
    }
    if (templates_layer_begin(key, layer, sizeof layer, why, sizeof why) < 0) {
        fprintf(stderr, "begin: %s\n", why);
        return 1;
    }
    snprintf(mount_dir, sizeof mount_dir, "%s/build-view", data_dir);
    snprintf(root, sizeof root, "%s/build-root", data_dir);
    mkdir(root, 0755);
    const char *const extra[] = {"/app", NULL};
    if (templates_mount_build_view(NULL, (const char *const *)argv + 7, argc - 7, key, extra, uid,
                                   uid, mount_dir, why, sizeof why) < 0) {
        fprintf(stderr, "build view: %s\n", why);
        templates_layer_discard(key);
        return 1;
    }
    rootfs_template template = {.view = mount_dir, .writable = true};
    char *command[] = {"/bin/sh", "-c", argv[6], NULL};
    char *env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/user", NULL};
    sandbox_spec spec = {.root = {.mount_point = root,
                                  .workspace = workspace,
                                  .runtime_dir = runtime,
                                  .uid = uid,
                                  .gid = uid,
                                  .tmp_bytes = 64 << 20,
                                  .template = &template},
                         .open_files = 256,
                         .file_size = 64 << 20,
                         .argv = command,
                         .envp = env,
                         .fds = {0, 1, 2, -1}};
    int pidfd = -1, status = 0;
    pid_t pid = sandbox_start(&spec, &pidfd, why, sizeof why);
    if (pid < 0) {
        fprintf(stderr, "sandbox: %s\n", why);
    } else {
        waitpid(pid, &status, 0);
        printf("exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    templates_unmount_build_view(mount_dir);
    rmdir(root);
    if (templates_layer_commit(key, why, sizeof why) < 0)
        printf("refused: %s\n", why);
    else
        printf("committed\n");
    fflush(stdout);
    return pid < 0 ? 1 : 0;
}
