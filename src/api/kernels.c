#include "api/kernels.h"

#include <string.h>
#include <strings.h>

#include "api/errors.h"
#include "model/box.h"
#include "model/manager.h"

/* Kernel Gateway passes only KERNEL_* variables from the request to the kernel. */
static json_t *kernel_env_from(http_request *request, json_t *env)
{
    json_t *filtered = json_object();
    if (!env || json_is_null(env))
        return filtered;
    if (!json_is_object(env)) {
        json_decref(filtered);
        http_respond_error(request, 400, "'env' must be an object of string values");
        return NULL;
    }
    const char *name;
    json_t *value;
    json_object_foreach(env, name, value)
    {
        if (!json_is_string(value)) {
            json_decref(filtered);
            http_respond_error(request, 400, "'env.%s' must be a string", name);
            return NULL;
        }
        if (strncmp(name, "KERNEL_", 7) == 0 && !strchr(name, '=') && strlen(name) < 256)
            json_object_set(filtered, name, value);
    }
    return filtered;
}

/* One of the egress lists as a client that can only pass env gives it: "a, b,c" -> ["a", "b",
   "c"] (blanks around entries and empty entries dropped); NULL when the variable is not set or
   names nothing (an empty value asks for nothing). The entries themselves are
   manager_set_egress's to judge. */
static json_t *egress_list_from_env(json_t *env, const char *name)
{
    const char *text = json_string_value(json_object_get(env, name));
    if (!text)
        return NULL;
    json_t *list = json_array();
    for (const char *at = text; *at;) {
        size_t length = strcspn(at, ",");
        const char *start = at, *end = at + length;
        while (start < end && (*start == ' ' || *start == '\t'))
            start++;
        while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        if (end > start)
            json_array_append_new(list, json_stringn(start, (size_t)(end - start)));
        at += length + (at[length] == ',');
    }
    if (json_array_size(list) == 0) {
        json_decref(list);
        return NULL;
    }
    return list;
}

/* The network a request asks for: the body's "network" (true, or /v1's {"allowOut", "denyOut"}),
   or env KERNEL_CELLBOX_NETWORK=1 with KERNEL_CELLBOX_NETWORK_ALLOW_OUT / _DENY_OUT
   (comma-separated, for clients that can only pass env). Lists ask for network, as on /v1. */
typedef struct network_request {
    json_t *network;   /* borrowed, or json_true() when lists ask for it */
    json_t *allow_out; /* new references, or NULL */
    json_t *deny_out;
    bool from_env;     /* the lists came from KERNEL_CELLBOX_NETWORK_ALLOW_OUT / _DENY_OUT */
} network_request;

/* False after answering 400. */
static bool read_network(http_request *request, json_t *body, json_t *env, network_request *out)
{
    json_t *network = json_object_get(body, "network");
    *out = (network_request){.network = network};
    if (json_is_object(network)) {
        out->network = json_true(); /* {} too, as on /v1 */
        out->allow_out = json_incref(json_object_get(network, "allowOut"));
        out->deny_out = json_incref(json_object_get(network, "denyOut"));
    } else {
        out->allow_out = egress_list_from_env(env, "KERNEL_CELLBOX_NETWORK_ALLOW_OUT");
        out->deny_out = egress_list_from_env(env, "KERNEL_CELLBOX_NETWORK_DENY_OUT");
        out->from_env = out->allow_out || out->deny_out;
    }
    if (!out->allow_out && !out->deny_out)
        return true;
    const char *env_network = json_string_value(json_object_get(env, "KERNEL_CELLBOX_NETWORK"));
    if (json_is_false(network) ||
        (env_network && (!strcmp(env_network, "0") || !strcasecmp(env_network, "false")))) {
        http_respond_error(request, 400, "KERNEL_CELLBOX_NETWORK_ALLOW_OUT and _DENY_OUT apply to "
                           "a sandbox with network: leave out \"network\": false and "
                           "KERNEL_CELLBOX_NETWORK=0, or the lists");
        json_decref(out->allow_out);
        json_decref(out->deny_out);
        return false;
    }
    out->network = json_true(); /* a singleton: no reference to drop */
    return true;
}

kernel *kernels_create(http_request *request, json_t *body)
{
    json_t *name = json_object_get(body, "name");
    if (name && !json_is_null(name) && !json_is_string(name)) {
        http_respond_error(request, 400, "'name' must be a string (a kernelspec name)");
        return NULL;
    }
    json_t *env = kernel_env_from(request, json_object_get(body, "env"));
    network_request network;
    if (!env || !read_network(request, body, env, &network)) {
        json_decref(env);
        return NULL;
    }
    const char *spec = json_string_value(name);
    failure_kind failure;
    char why[512];
    kernel *k = manager_create(spec && *spec ? spec : manager_default_kernel(), env,
                               json_object_get(body, "limits"), network.network, NULL, &failure,
                               why, sizeof why);
    json_decref(env);
    if (!k) {
        http_respond_error(request, errors_status_of_failure(failure), "%s", why);
    } else if ((network.allow_out || network.deny_out) &&
               manager_set_egress(k, network.allow_out, network.deny_out, why, sizeof why) < 0) {
        manager_delete(k);
        k = NULL;
        http_respond_error(request, 400, "%s%s", why,
                           network.from_env ? " (KERNEL_CELLBOX_NETWORK_ALLOW_OUT and _DENY_OUT "
                                              "are comma-separated addresses or CIDRs)"
                                            : "");
    } else {
        box_of(k); /* its /v1 record starts now: started_at is when it was made, not first seen */
    }
    json_decref(network.allow_out);
    json_decref(network.deny_out);
    return k;
}

void kernels_delete(kernel *k)
{
    manager_delete(k);
}
