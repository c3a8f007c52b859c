/* cellbox-init — pid 1 of a sandbox: cellbox-init --supervise=PID
 *
 * Linked statically and with nothing but libc: it is exec'd once per sandbox, in parallel
 * with the kernel's start, where the interpreter-embedding cellbox-kernel would load and
 * relocate libpython for a loop that only waits. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "sandbox/supervisor.h"

int main(int argc, char **argv)
{
    const char *prefix = "--supervise=";
    char *end = NULL;
    long program = argc == 2 && strncmp(argv[1], prefix, strlen(prefix)) == 0
                       ? strtol(argv[1] + strlen(prefix), &end, 10)
                       : 0;
    if (program <= 0 || !end || *end != '\0') {
        fprintf(stderr, "usage: cellbox-init --supervise=PID (pid 1 of a cellbox sandbox)\n");
        return 2;
    }
    /* A zygote's pid 1 comes here with every signal blocked (sandbox_clone_sharing_memory);
       exec has reset the handlers, so they can be let through now. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* exec made it dumpable again: keep the kernel (same uid) out of its /proc entries. */
    prctl(PR_SET_DUMPABLE, 0);
    supervisor_reap_until((pid_t)program);
}
