/* seccomp_filter — the system-call allow-list every sandbox process runs under (libseccomp).
 *
 * In the spirit of Docker's default profile: default EPERM, ~330 allowed calls, namespace flags
 * refused in clone, clone3 ENOSYS (libc falls back to clone), only AF_UNIX/INET/INET6/NETLINK
 * sockets, TIOCSTI refused on the low 32 bits of the request, other architectures killed. */
#ifndef CELLBOX_SANDBOX_SECCOMP_FILTER_H
#define CELLBOX_SANDBOX_SECCOMP_FILTER_H

/* Compiles the filter once, so that processes forked afterwards only load it. Optional (the
   first load compiles it otherwise). 0 or -errno. */
int seccomp_filter_prepare(void);

/* Loads the filter into the calling process (no_new_privs must be set). 0 or -errno. */
int seccomp_filter_load(void);

#endif
