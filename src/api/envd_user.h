/* envd_user — the user an envd call names. E2B's SDKs name one with `Authorization: Basic
 * base64(name:)` on Connect-RPC calls and with `?username=` on /files; E2B's sandboxes have two,
 * `user` and `root`, and a call that names none is `user`'s.
 *
 * A cellbox sandbox has one identity (no user namespace: docs/security.md), so both names act as
 * the sandbox user, never the host's root: `root` may do what `user` may (write in /home/user,
 * /workspace and /tmp, read what is readable) and no more. Relative paths resolve against
 * ENVD_HOME_DIR for both (root's own /root is read-only here). Called by envd.c for /files and
 * before every Connect-RPC call, and by the process service for a command's user. */
#ifndef CELLBOX_API_ENVD_USER_H
#define CELLBOX_API_ENVD_USER_H

#include <stdbool.h>
#include <stddef.h>

#include "http/server.h"

/* The user's home: the default working directory of envd's processes and the directory relative
   paths resolve against on E2B's routes (the workspace under E2B's name: sandbox/rootfs.h). */
#define ENVD_HOME_DIR "/home/user"

typedef enum envd_user {
    ENVD_USER_USER, /* "user": the sandbox user, whose home is ENVD_HOME_DIR */
    ENVD_USER_ROOT, /* "root": the same identity here (see above) */
} envd_user;

/* The user `request` names (?username= first, then Authorization: Basic), ENVD_USER_USER when it
   names none. False with `why` filled (a sentence naming the user and the two there are) when it
   names another or its Authorization cannot be read; the caller answers in its route's shape
   (E2B's 400 on /files, Connect's invalid_argument). */
bool envd_user_of_request(http_request *request, envd_user *user, char *why, size_t why_size);
const char *envd_user_name(envd_user user);
/* `path` as E2B's routes read it into `out`: an absolute path as it is, a relative one against
   ENVD_HOME_DIR ("data.csv" -> "/home/user/data.csv"); false when it does not fit. */
bool envd_absolute_path(const char *path, char *out, size_t size);

#endif
