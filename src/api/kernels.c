#include "api/kernels.h"

#include <string.h>

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

kernel *kernels_create(http_request *request, json_t *body)
{
    json_t *name = json_object_get(body, "name");
    if (name && !json_is_null(name) && !json_is_string(name)) {
        http_respond_error(request, 400, "'name' must be a string (a kernelspec name)");
        return NULL;
    }
    json_t *env = kernel_env_from(request, json_object_get(body, "env"));
    if (!env)
        return NULL;
    const char *spec = json_string_value(name);
    failure_kind failure;
    char why[512];
    kernel *k = manager_create(spec && *spec ? spec : manager_default_kernel(), env,
                               json_object_get(body, "limits"), json_object_get(body, "network"),
                               NULL, &failure, why, sizeof why);
    json_decref(env);
    if (!k)
        http_respond_error(request, errors_status_of_failure(failure), "%s", why);
    else
        box_of(k); /* its /v1 record starts now: started_at is when it was made, not first seen */
    return k;
}

void kernels_delete(kernel *k)
{
    manager_delete(k);
}
