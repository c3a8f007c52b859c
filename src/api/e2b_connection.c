#include "api/e2b_connection.h"

#include "api/envd_access.h"
#include "api/ports.h"
#include "kernel/kernel.h"

/* What the SDK needs to reach a sandbox. envdAccessToken is the sandbox's own access token
   (api/envd_access.h): the SDK sends it as X-Access-Token on every call into the sandbox and
   signs file URLs with it. trafficAccessToken is the key the request came with (it was
   admitted, so it is the daemon's token): the SDK sends it to the interpreter's contexts, which
   carry no other credential. */
json_t *e2b_connection_model(http_request *request, box *b)
{
    const char *key = http_header(request, "X-API-Key");
    char token[ENVD_ACCESS_TOKEN_SIZE];
    envd_access_token(b, token);
    json_t *model = json_pack("{s:s, s:s, s:s, s:s, s:s}", "sandboxID", box_id(b), "templateID",
                              kernel_spec(box_default_kernel(b))->name, "clientID", E2B_CLIENT_ID,
                              "envdVersion", E2B_ENVD_VERSION, "domain", ports_domain());
    json_object_set_new(model, "envdAccessToken", json_string(token));
    json_object_set_new(model, "trafficAccessToken", key ? json_string(key) : json_null());
    return model;
}
