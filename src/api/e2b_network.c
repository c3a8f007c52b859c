#include "api/e2b_network.h"

#include <stdbool.h>
#include <string.h>

#include "api/errors.h"
#include "api/request.h"
#include "kernel/kernel.h"
#include "model/manager.h"

#define ALL_TRAFFIC "0.0.0.0/0" /* E2B's allTraffic: what allowInternetAccess: false denies */

/* The options E2B's egress proxy applies and cellbox does not (at create, and rules and
   egressProxy on updateNetwork): refusing them by name keeps an agent from believing a rule or a
   proxy holds when nothing applies it. allowPublicTraffic:
   false is what cellbox does anyway (its sandbox hosts always need the daemon's token). NULL
   when none is asked for. */
static const char *cloud_only_option(json_t *network)
{
    static const char *const proxy_options[] = {"rules", "egressProxy", "maskRequestHost",
                                                "httpsPorts"};
    if (!json_is_object(network))
        return NULL;
    for (size_t i = 0; i < sizeof proxy_options / sizeof *proxy_options; i++) {
        json_t *value = json_object_get(network, proxy_options[i]);
        if (value && !json_is_null(value))
            return proxy_options[i];
    }
    if (json_is_true(json_object_get(network, "allowPublicTraffic")))
        return "allowPublicTraffic (cellbox's sandbox hosts always need the daemon's token)";
    return NULL;
}

static json_t *list_or_null(json_t *network, const char *name)
{
    json_t *list = json_object_get(network, name);
    return list && !json_is_null(list) ? list : NULL;
}

/* denyOut with 0.0.0.0/0 added (allowInternetAccess: false), a new reference. A list that is
   no array is passed on as it is, for manager_set_egress to name. */
static json_t *deny_all_traffic(json_t *deny_out)
{
    if (deny_out && !json_is_array(deny_out))
        return json_incref(deny_out);
    json_t *list = deny_out ? json_copy(deny_out) : json_array();
    size_t i;
    json_t *entry;
    json_array_foreach(list, i, entry)
    {
        if (json_is_string(entry) && strcmp(json_string_value(entry), ALL_TRAFFIC) == 0)
            return list;
    }
    json_array_append_new(list, json_string(ALL_TRAFFIC));
    return list;
}

int e2b_network_read_create(http_request *request, json_t *body, e2b_network_request *out)
{
    *out = (e2b_network_request){0};
    json_t *network = json_object_get(body, "network");
    bool internet = false;
    if (!request_optional_bool(request, body, "allow_internet_access", &internet))
        return -1;
    if (network && !json_is_null(network) && !json_is_object(network)) {
        errors_respond_e2b(request, 400,
                           "'network' must be an object like {\"allowOut\": "
                           "[\"203.0.113.0/24\"], \"denyOut\": [\"0.0.0.0/0\"]}");
        return -1;
    }
    const char *option = cloud_only_option(network);
    if (option) {
        errors_respond_e2b(request, 501,
                           "not supported by cellbox: Sandbox.create's network option %s: it "
                           "belongs to E2B's egress proxy; cellbox takes allowInternetAccess and "
                           "network {allowOut, denyOut} (on a daemon started with "
                           "--allow-network); leave the option out",
                           option);
        return -1;
    }
    bool internet_given = json_is_boolean(json_object_get(body, "allow_internet_access"));
    json_t *allow_out = list_or_null(network, "allowOut"),
           *deny_out = list_or_null(network, "denyOut");
    bool lists = allow_out || deny_out;
    if (internet || lists)
        out->network = json_true();
    else if (internet_given)
        out->network = json_false();
    if (!lists)
        return 0;
    out->allow_out = allow_out ? json_incref(allow_out) : NULL;
    out->deny_out = internet_given && !internet ? deny_all_traffic(deny_out)
                    : deny_out                  ? json_incref(deny_out)
                                                : NULL;
    return 0;
}

int e2b_network_apply(kernel *k, const e2b_network_request *request, char *why, size_t why_size)
{
    if (!request->allow_out && !request->deny_out)
        return 0;
    return manager_set_egress(k, request->allow_out, request->deny_out, why, why_size);
}

void e2b_network_request_free(e2b_network_request *request)
{
    json_decref(request->network);
    json_decref(request->allow_out);
    json_decref(request->deny_out);
    *request = (e2b_network_request){0};
}

void e2b_network_update(http_request *request, box *b)
{
    json_t *body = request_parse_body(request, REQUEST_ANY_FIELD);
    if (!body)
        return;
    bool internet = true;
    const char *option = cloud_only_option(body); /* rules, egressProxy */
    if (option)
        errors_respond_e2b(request, 501,
                           "not supported by cellbox: updateNetwork's %s: it belongs to E2B's "
                           "egress proxy; cellbox takes allowOut, denyOut and allowInternetAccess",
                           option);
    else if (!box_limits(b)->network)
        errors_respond_e2b(request, 409,
                           "sandbox %s has no network: updateNetwork applies to a sandbox created "
                           "with allowInternetAccess: true or network {allowOut, denyOut} (on a "
                           "daemon started with --allow-network); create a new one that way",
                           box_id(b));
    else if (request_optional_bool(request, body, "allow_internet_access", &internet)) {
        json_t *allow_out = list_or_null(body, "allowOut");
        json_t *deny_out = internet ? json_incref(list_or_null(body, "denyOut"))
                                    : deny_all_traffic(list_or_null(body, "denyOut"));
        char why[512];
        if (manager_set_egress(box_default_kernel(b), allow_out, deny_out, why, sizeof why) < 0)
            errors_respond_e2b(request, 400, "%s", why);
        else
            http_respond(request, 204, NULL, "", 0);
        json_decref(deny_out);
    }
    json_decref(body);
}

void e2b_network_describe(box *b, json_t *model)
{
    json_t *network = kernel_network_model(box_default_kernel(b));
    if (!json_is_object(network)) {
        json_object_set_new(model, "allowInternetAccess", json_false());
        json_decref(network);
        return;
    }
    /* E2B reports false once everything is denied (its allowInternetAccess: false). */
    json_t *deny_out = json_object_get(network, "denyOut");
    bool all_denied = false;
    size_t i;
    json_t *entry;
    json_array_foreach(deny_out, i, entry)
    {
        if (json_is_string(entry) && strcmp(json_string_value(entry), ALL_TRAFFIC) == 0)
            all_denied = true;
    }
    json_object_set_new(model, "allowInternetAccess", json_boolean(!all_denied));
    json_object_set_new(model, "network",
                        json_pack("{s:O, s:O}", "allowOut", json_object_get(network, "allowOut"),
                                  "denyOut", deny_out));
    json_decref(network);
}
