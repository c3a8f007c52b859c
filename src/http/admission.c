#include "http/admission.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* A connection past a limit gets this long to send its request and read the answer. */
#define REFUSED_TIMEOUT_S 5

typedef struct address_key {
    unsigned char bytes[16]; /* IPv4 in the first 4, the rest zero */
    int family;
} address_key;

typedef struct address_count {
    address_key key;
    unsigned connections;
} address_count;

/* What one TCP connection is, kept as libmicrohttpd's socket context. */
typedef struct admitted_connection {
    address_key key;
    admission_verdict verdict;
} admitted_connection;

static struct {
    unsigned max_total, max_per_address; /* 0 = no limit */
    unsigned connected;
    /* Addresses with a connection open; a short list for the common case of few clients
       (it is scanned per accept). */
    address_count *addresses;
    size_t address_count, address_capacity;
} admission;

void admission_set_limits(unsigned max_total, unsigned max_per_address)
{
    admission.max_total = max_total;
    admission.max_per_address = max_per_address;
}

unsigned admission_max_total(void) { return admission.max_total; }
unsigned admission_max_per_address(void) { return admission.max_per_address; }

static address_key key_of(struct MHD_Connection *connection)
{
    address_key key = {.family = AF_UNSPEC};
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *address = info ? info->client_addr : NULL;
    if (address && address->sa_family == AF_INET) {
        key.family = AF_INET;
        memcpy(key.bytes, &((const struct sockaddr_in *)address)->sin_addr, 4);
    } else if (address && address->sa_family == AF_INET6) {
        key.family = AF_INET6;
        memcpy(key.bytes, &((const struct sockaddr_in6 *)address)->sin6_addr, 16);
    }
    return key;
}

static address_count *count_of(const address_key *key, bool create)
{
    for (size_t i = 0; i < admission.address_count; i++)
        if (memcmp(&admission.addresses[i].key, key, sizeof *key) == 0)
            return &admission.addresses[i];
    if (!create)
        return NULL;
    if (admission.address_count == admission.address_capacity) {
        size_t capacity = admission.address_capacity ? admission.address_capacity * 2 : 16;
        address_count *grown = realloc(admission.addresses, capacity * sizeof *grown);
        if (!grown)
            die("out of memory");
        admission.addresses = grown;
        admission.address_capacity = capacity;
    }
    address_count *entry = &admission.addresses[admission.address_count++];
    *entry = (address_count){.key = *key};
    return entry;
}

static void count_out(const address_key *key)
{
    address_count *entry = count_of(key, false);
    if (entry && --entry->connections == 0)
        *entry = admission.addresses[--admission.address_count];
}

static void count_in(struct MHD_Connection *connection, void **socket_context)
{
    admitted_connection *admitted = calloc(1, sizeof *admitted);
    if (!admitted)
        die("out of memory");
    admitted->key = key_of(connection);
    address_count *entry = count_of(&admitted->key, true);
    entry->connections++;
    admission.connected++;
    if (admission.max_total && admission.connected > admission.max_total)
        admitted->verdict = ADMISSION_OVER_TOTAL;
    else if (admission.max_per_address && entry->connections > admission.max_per_address)
        admitted->verdict = ADMISSION_OVER_ADDRESS;
    if (admitted->verdict != ADMISSION_ADMITTED)
        MHD_set_connection_option(connection, MHD_CONNECTION_OPTION_TIMEOUT, REFUSED_TIMEOUT_S);
    *socket_context = admitted;
}

void admission_on_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                             enum MHD_ConnectionNotificationCode code)
{
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        count_in(connection, socket_context);
        return;
    }
    admitted_connection *admitted = *socket_context;
    if (!admitted)
        return;
    count_out(&admitted->key);
    admission.connected--;
    free(admitted);
    *socket_context = NULL;
}

admission_verdict admission_verdict_of(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    const admitted_connection *admitted = info ? info->socket_context : NULL;
    return admitted ? admitted->verdict : ADMISSION_ADMITTED;
}
