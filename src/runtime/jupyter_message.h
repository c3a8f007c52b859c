/* jupyter_message — the Jupyter messages a kernel written in C builds itself (the bash kernel's,
 * the Jupyter bridge's own), with headers as docs/kernel-protocol.md describes them:
 * {msg_id: "<session>_<pid>_<n>", session, username, date "YYYY-MM-DDTHH:MM:SS.ffffffZ",
 * msg_type, version "5.3"}. */
#ifndef CELLBOX_RUNTIME_JUPYTER_MESSAGE_H
#define CELLBOX_RUNTIME_JUPYTER_MESSAGE_H

#include <jansson.h>

typedef struct jupyter_session {
    char id[37]; /* a uuid4, new for every kernel process */
    unsigned long long counter;
} jupyter_session;

void jupyter_session_init(jupyter_session *session);
/* A frame for the daemon: {channel, header, parent_header, metadata: {}, content}. `request` is
   the frame being answered (its header becomes parent_header) or NULL ({}); `content` is stolen. */
json_t *jupyter_message_new(jupyter_session *session, const char *channel, const char *msg_type,
                            const json_t *request, json_t *content);
/* iopub status {execution_state: state} with `request` as parent (NULL: none). */
json_t *jupyter_message_status(jupyter_session *session, const json_t *request, const char *state);

#endif
