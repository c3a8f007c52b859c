/* interrupt_sweep — re-delivering a missed SIGINT in the kernel's group (see interrupt_sweep.h).
 *
 * /proc/PID/stat gives the group and the parent; /proc/PID/status the signal masks, as hex
 * words where bit N-1 is signal N. Only the group's own processes are looked at: a program that
 * left it (setsid, a new group) chose not to be interrupted with the kernel. */
#include "runtime/interrupt_sweep.h"

#include <ctype.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static const unsigned long long SIGINT_BIT = 1ULL << (SIGINT - 1);

/* What the sweep needs of one process. */
struct process_signals {
    pid_t parent;
    pid_t group;
    char command[32]; /* comm: "bash" for a child that has not exec'd yet */
    bool int_default; /* SIGINT neither caught nor ignored */
    bool int_caught;  /* SIGINT has a handler */
    bool int_pending; /* SIGINT queued (blocked, or not yet delivered) */
};

static unsigned long long hex_field(const char *line, const char *name)
{
    size_t length = strlen(name);
    return strncmp(line, name, length) == 0 ? strtoull(line + length, NULL, 16) : 0;
}

static bool read_stat(pid_t pid, struct process_signals *process)
{
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *file = fopen(path, "re");
    if (file == NULL)
        return false;
    size_t got = fread(text, 1, sizeof text - 1, file);
    fclose(file);
    text[got] = '\0';
    /* "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so it ends at
     * the last ')'. */
    char *open = strchr(text, '('), *close = strrchr(text, ')');
    if (open == NULL || close == NULL || close < open)
        return false;
    snprintf(process->command, sizeof process->command, "%.*s", (int)(close - open - 1), open + 1);
    char state;
    int parent, group;
    if (sscanf(close + 1, " %c %d %d", &state, &parent, &group) != 3 || state == 'Z')
        return false; /* a zombie takes no signal */
    process->parent = parent;
    process->group = group;
    return true;
}

static bool read_signals(pid_t pid, struct process_signals *process)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *file = fopen(path, "re");
    if (file == NULL)
        return false;
    unsigned long long ignored = 0, caught = 0, pending = 0;
    while (fgets(line, sizeof line, file) != NULL) {
        ignored |= hex_field(line, "SigIgn:");
        caught |= hex_field(line, "SigCgt:");
        pending |= hex_field(line, "SigPnd:") | hex_field(line, "ShdPnd:");
    }
    fclose(file);
    process->int_caught = (caught & SIGINT_BIT) != 0;
    process->int_default = !process->int_caught && (ignored & SIGINT_BIT) == 0;
    process->int_pending = (pending & SIGINT_BIT) != 0;
    return true;
}

interrupt_sweep_result interrupt_sweep(pid_t shell)
{
    interrupt_sweep_result result = {0, 0};
    /* The one who started this process may share its group (the sandbox's pid 1 does): it is
     * not the kernel's to interrupt. */
    pid_t self = getpid(), starter = getppid(), group = getpgrp();
    DIR *proc = opendir("/proc");
    if (proc == NULL)
        return result;
    struct dirent *entry;
    while ((entry = readdir(proc)) != NULL) {
        if (!isdigit((unsigned char)entry->d_name[0]))
            continue;
        pid_t pid = (pid_t)atoi(entry->d_name);
        if (pid == self || pid == starter || pid == shell)
            continue;
        /* Held before /proc is read, so the signal goes to the process that was read or, if
         * that one has ended meanwhile, to no one: never to a later process given its pid. */
        int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pidfd < 0)
            continue;
        struct process_signals process = {0};
        if (read_stat(pid, &process) && process.group == group && read_signals(pid, &process)) {
            if (process.int_default && !process.int_pending) {
                if (syscall(SYS_pidfd_send_signal, pidfd, SIGINT, NULL, 0) == 0)
                    result.signalled++;
            } else if (process.parent == shell && process.int_caught &&
                       strcmp(process.command, "bash") == 0) {
                result.forking++;
            }
        }
        close(pidfd);
    }
    closedir(proc);
    return result;
}
