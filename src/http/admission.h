/* admission — how many clients are connected, in all and per address, and who is over a limit.
 *
 * libmicrohttpd's own limits (MHD_OPTION_CONNECTION_LIMIT, ..._PER_IP_CONNECTION_LIMIT) close a
 * connection past them without a word. So libmicrohttpd gets ours plus some headroom, and this
 * module counts every connection from accept to close (an upgraded WebSocket included: it stays
 * libmicrohttpd's until closed); one past our limit is still accepted, and its first request is
 * answered 503 (all) or 429 (one address) with a body saying which limit, then closed. */
#ifndef CELLBOX_HTTP_ADMISSION_H
#define CELLBOX_HTTP_ADMISSION_H

#include <microhttpd.h>

/* Connections past our limits that libmicrohttpd still accepts, to answer them. */
#define ADMISSION_HEADROOM 16u

typedef enum admission_verdict {
    ADMISSION_ADMITTED,
    ADMISSION_OVER_TOTAL,   /* --max-connections */
    ADMISSION_OVER_ADDRESS, /* --max-connections-per-ip */
} admission_verdict;

/* Called once at start; 0 = no limit. */
void admission_set_limits(unsigned max_total, unsigned max_per_address);
/* The MHD_OPTION_NOTIFY_CONNECTION callback: counts a connection in and out. */
void admission_on_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                             enum MHD_ConnectionNotificationCode code);
admission_verdict admission_verdict_of(struct MHD_Connection *connection);
unsigned admission_max_total(void);
unsigned admission_max_per_address(void);

#endif
