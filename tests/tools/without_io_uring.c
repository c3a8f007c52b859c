/* without-io-uring — runs a command where io_uring_setup(2) fails with ENOSYS, as on hosts that
 * turn io_uring off (sysctl kernel.io_uring_disabled, a container runtime's seccomp profile).
 * The integration tests start cellboxd through it to check the zygote's way without io_uring.
 *
 *   without-io-uring COMMAND [ARG...]
 *
 * Run as root: the filter is loaded without no_new_privs, so the command runs as it otherwise
 * would (the filter is inherited by everything it starts, sandboxes included). */
#include <errno.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: without-io-uring COMMAND [ARG...]\n");
        return 2;
    }
    scmp_filter_ctx filter = seccomp_init(SCMP_ACT_ALLOW);
    int rc = filter ? seccomp_attr_set(filter, SCMP_FLTATR_CTL_NNP, 0) : -ENOMEM;
    if (rc == 0)
        rc = seccomp_rule_add(filter, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(io_uring_setup), 0);
    if (rc == 0)
        rc = seccomp_load(filter);
    if (filter)
        seccomp_release(filter);
    if (rc < 0) {
        fprintf(stderr, "without-io-uring: cannot load the filter: %s\n", strerror(-rc));
        return 1;
    }
    execvp(argv[1], argv + 1);
    fprintf(stderr, "without-io-uring: cannot run %s: %s\n", argv[1], strerror(errno));
    return 127;
}
