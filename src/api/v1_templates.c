#include "api/v1_templates.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/errors.h"
#include "common/log.h"
#include "common/text.h"
#include "http/query.h"
#include "model/templates.h"

#define PRELOAD_MAX 1000
#define POOL_SIZE_MAX 1000
/* The largest tarball an import keeps in /tmp while it arrives. */
#define UPLOAD_BYTES_MAX (16LL << 30)

void v1_templates_list(http_request *request)
{
    http_respond_json(request, 200, templates_list_model());
}

static void get_template(http_request *request, const char *name)
{
    json_t *model = templates_model(name);
    if (!model) {
        http_respond_error(request, 404,
                           "template '%.*s' does not exist (GET /v1/templates lists them)",
                           text_utf8_prefix(name, 200), name);
        return;
    }
    http_respond_json(request, 200, model);
}

static void delete_template(http_request *request, const char *name)
{
    failure_kind failure;
    char why[1024];
    if (templates_delete(name, &failure, why, sizeof why) < 0) {
        http_respond_error(request, errors_status_of_failure(failure), "%s", why);
        return;
    }
    http_respond(request, 204, NULL, "", 0);
}

/* ---- POST /v1/templates/{name}/import ---- */

/* The tarball is spooled to an unnamed temporary file as it arrives, then imported. */
typedef struct template_upload {
    char *name, *preload;
    long long pool_size;
    bool replace;
    int spool_fd;
    long long received;
    bool write_failed, too_large;
} template_upload;

static void free_upload(template_upload *u)
{
    if (u->spool_fd >= 0)
        close(u->spool_fd);
    free(u->name);
    free(u->preload);
    free(u);
}

static int on_upload_data(void *arg, const char *data, size_t length)
{
    template_upload *u = arg;
    u->received += (long long)length;
    if (u->received > UPLOAD_BYTES_MAX) {
        u->too_large = true;
        return -1;
    }
    while (length > 0) {
        ssize_t n = write(u->spool_fd, data, length);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            u->write_failed = true;
            return -1;
        }
        data += n;
        length -= (size_t)n;
    }
    return 0;
}

static void on_upload_end(http_request *request, void *arg)
{
    template_upload *u = arg;
    failure_kind failure;
    char why[1024];
    if (u->too_large) {
        http_respond_error(request, 413,
                           "the tarball is over %lld GiB: import a smaller root filesystem, or "
                           "compress it (gzip, xz, zstd)",
                           UPLOAD_BYTES_MAX >> 30);
    } else if (u->write_failed || lseek(u->spool_fd, 0, SEEK_SET) < 0) {
        http_respond_error(request, 507,
                           "cannot keep the tarball in the daemon's /tmp (%s): free space there "
                           "or send a smaller, compressed one",
                           strerror(errno));
    } else if (templates_import(u->name, u->spool_fd, u->preload, (int)u->pool_size, u->replace,
                                &failure, why, sizeof why) < 0) {
        http_respond_error(request, errors_status_of_failure(failure), "%s", why);
    } else {
        http_respond_json(request, 201, templates_model(u->name));
    }
    free_upload(u);
}

static void on_upload_abort(void *arg)
{
    free_upload(arg);
}

static const http_body_receiver upload_receiver = {
    .on_data = on_upload_data, .on_end = on_upload_end, .on_abort = on_upload_abort};

static void import_template(http_request *request, const char *name)
{
    const char *preload = http_query(request, "preload");
    long long pool_size = 0;
    bool replace = false;
    failure_kind failure;
    char why[1024];
    if (!http_query_integer(request, "pool_size", 0, POOL_SIZE_MAX, 0, &pool_size) ||
        !http_query_flag(request, "replace", &replace))
        return;
    if (preload && strlen(preload) > PRELOAD_MAX) {
        http_respond_error(request, 400,
                           "preload: at most %d characters of module names "
                           "separated by commas",
                           PRELOAD_MAX);
        return;
    }
    /* A bad or taken name costs no upload. */
    if (templates_check_name(name, replace, &failure, why, sizeof why) < 0) {
        http_respond_error(request, errors_status_of_failure(failure), "%s", why);
        return;
    }
    template_upload *u = calloc(1, sizeof *u);
    if (!u || !(u->name = strdup(name)) || !(u->preload = strdup(preload ? preload : "")))
        die("out of memory");
    u->pool_size = pool_size;
    u->replace = replace;
    u->spool_fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (u->spool_fd < 0) {
        http_respond_error(request, 500, "cannot make a temporary file in the daemon's /tmp: %s",
                           strerror(errno));
        free_upload(u);
        return;
    }
    if (http_body_is_streamed(request)) {
        http_receive_body(request, &upload_receiver, u);
        return;
    }
    size_t length = 0;
    const char *body = http_body(request, &length);
    on_upload_data(u, body, length); /* a failed write is answered by on_upload_end */
    on_upload_end(request, u);
}

void v1_templates_route(http_request *request, const char *name, const char *action)
{
    if (!action) {
        if (http_method_is(request, "GET"))
            get_template(request, name);
        else if (http_method_is(request, "DELETE"))
            delete_template(request, name);
        else
            http_respond_method_not_allowed(request, "GET, DELETE");
        return;
    }
    if (strcmp(action, "import") == 0) {
        if (http_method_is(request, "POST"))
            import_template(request, name);
        else
            http_respond_method_not_allowed(request, "POST");
        return;
    }
    http_respond_error(request, 404, "no such endpoint: %s", http_path(request));
}

bool v1_templates_streams_body(const char *method, const char *path)
{
    const char *prefix = "/v1/templates/";
    if (strcmp(method, "POST") != 0 || strncmp(path, prefix, strlen(prefix)) != 0)
        return false;
    const char *slash = strchr(path + strlen(prefix), '/');
    return slash && strcmp(slash, "/import") == 0;
}
