#include "sandbox/supervisor.h"

#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

void supervisor_reap_until(pid_t program)
{
    for (;;) {
        int status;
        pid_t reaped = waitpid(-1, &status, 0);
        if (reaped == program)
            _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        if (reaped < 0 && errno == ECHILD)
            _exit(127);
    }
}
