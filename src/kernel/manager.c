#include "kernel/manager.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/loop.h"

static manager_options options;
static kernel **kernels;
static size_t kernel_count, kernel_capacity;
static void (*delete_hook)(kernel *k);

static void schedule_cull(void);

void manager_init(const manager_options *opts)
{
    options = *opts;
    char path[4096];
    snprintf(path, sizeof path, "%s/workspaces", options.data_dir);
    if (fs_mkdir_p(path, 0700) < 0)
        die("cannot create the data directory %s: %s (choose another with --data-dir)", path,
            strerror(errno));
    if (options.cull_idle_timeout > 0)
        schedule_cull();
}

void manager_set_delete_hook(void (*hook)(kernel *k)) { delete_hook = hook; }
const char *manager_default_kernel(void) { return options.default_kernel; }
size_t manager_count(void) { return kernel_count; }
kernel *manager_at(size_t index) { return index < kernel_count ? kernels[index] : NULL; }

kernel *manager_find(const char *id)
{
    for (size_t i = 0; i < kernel_count; i++)
        if (strcmp(kernel_id(kernels[i]), id) == 0)
            return kernels[i];
    return NULL;
}

static char *workspace_path(const char *id)
{
    char *path;
    if (asprintf(&path, "%s/workspaces/%s", options.data_dir, id) < 0)
        die("out of memory");
    return path;
}

kernel *manager_create(const char *spec_name, json_t *env, int *status, char *why, size_t why_size)
{
    const kernelspec *spec = kernelspec_find(spec_name ? spec_name : options.default_kernel);
    if (!spec) {
        *status = 404;
        snprintf(why, why_size, "No such kernel named %s", spec_name);
        return NULL;
    }
    if (options.max_kernels > 0 && kernel_count >= (size_t)options.max_kernels) {
        *status = 403;
        snprintf(why, why_size, "Resource Limit: maximum number of kernels (%d) reached; delete a "
                 "kernel or raise --max-kernels", options.max_kernels);
        return NULL;
    }
    char id[UUID_STRING_LENGTH + 1];
    id_uuid4(id);
    char *workspace = workspace_path(id);
    if (fs_mkdir_p(workspace, 0700) < 0) {
        *status = 500;
        snprintf(why, why_size, "cannot create the workspace %s: %s", workspace, strerror(errno));
        free(workspace);
        return NULL;
    }
    kernel *k = kernel_start(id, spec, workspace, env, why, why_size);
    if (!k) {
        *status = 500;
        fs_remove_tree(workspace);
        free(workspace);
        return NULL;
    }
    free(workspace);
    if (kernel_count == kernel_capacity) {
        kernel_capacity = kernel_capacity ? kernel_capacity * 2 : 16;
        kernels = realloc(kernels, kernel_capacity * sizeof *kernels);
        if (!kernels)
            die("out of memory");
    }
    kernels[kernel_count++] = k;
    log_info("kernel %s started (%s)", id, spec->name);
    return k;
}

void manager_delete(kernel *k)
{
    for (size_t i = 0; i < kernel_count; i++) {
        if (kernels[i] != k)
            continue;
        memmove(&kernels[i], &kernels[i + 1], (kernel_count - i - 1) * sizeof *kernels);
        kernel_count--;
        break;
    }
    if (delete_hook)
        delete_hook(k);
    if (!options.keep_workspaces && fs_remove_tree(kernel_workspace(k)) < 0)
        log_warn("kernel %s: could not remove its workspace %s: %s", kernel_id(k),
                 kernel_workspace(k), strerror(errno));
    log_info("kernel %s deleted", kernel_id(k));
    kernel_destroy(k);
}

json_t *manager_kernel_model(const kernel *k)
{
    char activity[ISO_TIME_BUFFER];
    clock_format_iso(kernel_last_activity_us(k), activity);
    json_t *model = json_pack("{s:s, s:s, s:s, s:s, s:i}", "id", kernel_id(k), "name",
                              kernel_spec(k)->name, "last_activity", activity, "execution_state",
                              kernel_state_name(kernel_get_state(k)), "connections",
                              kernel_connection_count(k));
    if (kernel_get_state(k) == KERNEL_DEAD && kernel_death_reason(k)[0])
        json_object_set_new(model, "reason", json_string(kernel_death_reason(k)));
    return model;
}

/* jupyter_server's rule: dead kernels go on every pass; a live one when it has been idle longer
   than the timeout and neither a connection (unless cull_connected) nor a running cell (unless
   cull_busy) protects it. */
static bool should_cull(const kernel *k, int64_t now_us)
{
    if (kernel_get_state(k) == KERNEL_DEAD)
        return true;
    int64_t idle_us = now_us - kernel_last_activity_us(k);
    if (idle_us <= (int64_t)options.cull_idle_timeout * 1000000)
        return false;
    if (kernel_get_state(k) == KERNEL_BUSY && !options.cull_busy)
        return false;
    if (kernel_connection_count(k) > 0 && !options.cull_connected)
        return false;
    return true;
}

static void cull_pass(void *arg)
{
    int64_t now = clock_wall_us();
    for (size_t i = kernel_count; i-- > 0;) {
        if (i < kernel_count && should_cull(kernels[i], now)) {
            log_info("culling kernel %s (%s)", kernel_id(kernels[i]),
                     kernel_state_name(kernel_get_state(kernels[i])));
            manager_delete(kernels[i]);
        }
    }
    schedule_cull();
}

static void schedule_cull(void)
{
    int interval = options.cull_interval > 0 ? options.cull_interval : 300;
    loop_timer_add((int64_t)interval * 1000, cull_pass, NULL);
}

void manager_shutdown_all(void)
{
    while (kernel_count > 0)
        manager_delete(kernels[kernel_count - 1]);
}
