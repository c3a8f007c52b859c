/* jupyter_message — headers and frames for the kernels written in C (see jupyter_message.h). */
#include "runtime/jupyter_message.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

void jupyter_session_init(jupyter_session *session)
{
    unsigned char bytes[16] = {0};
    size_t got = 0;
    while (got < sizeof bytes) {
        ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
        if (n <= 0)
            break; /* (never on Linux >= 3.17 after boot) a less random id still names a session */
        got += (size_t)n;
    }
    bytes[6] = (unsigned char)((bytes[6] & 0x0f) | 0x40); /* version 4 */
    bytes[8] = (unsigned char)((bytes[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    snprintf(session->id, sizeof session->id,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", bytes[0],
             bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8],
             bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]);
    session->counter = 0;
}

/* "YYYY-MM-DDTHH:MM:SS.ffffffZ", as jupyter_client writes it. */
static void format_date(char *out, size_t size)
{
    struct timespec now;
    struct tm utc;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &utc);
    char seconds[32];
    strftime(seconds, sizeof seconds, "%Y-%m-%dT%H:%M:%S", &utc);
    snprintf(out, size, "%.19s.%06dZ", seconds, (int)(now.tv_nsec / 1000) % 1000000);
}

static json_t *new_header(jupyter_session *session, const char *msg_type)
{
    char msg_id[96];
    char date[48];
    snprintf(msg_id, sizeof msg_id, "%s_%d_%llu", session->id, (int)getpid(), session->counter++);
    format_date(date, sizeof date);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", msg_id, "session", session->id,
                     "username", "kernel", "date", date, "msg_type", msg_type, "version", "5.3");
}

json_t *jupyter_message_new(jupyter_session *session, const char *channel, const char *msg_type,
                            const json_t *request, json_t *content)
{
    json_t *parent = request ? json_object_get(request, "header") : NULL;
    json_t *frame = json_object();
    json_object_set_new(frame, "channel", json_string(channel));
    json_object_set_new(frame, "header", new_header(session, msg_type));
    json_object_set_new(frame, "parent_header",
                        json_is_object(parent) ? json_deep_copy(parent) : json_object());
    json_object_set_new(frame, "metadata", json_object());
    json_object_set_new(frame, "content", content ? content : json_object());
    return frame;
}

json_t *jupyter_message_status(jupyter_session *session, const json_t *request, const char *state)
{
    return jupyter_message_new(session, "iopub", "status", request,
                               json_pack("{s:s}", "execution_state", state));
}
