#include "sandbox/limits.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

long long limits_parse_size(const char *text)
{
    /* strtod alone would also take " 1", "0x10", "nan" and "inf" */
    if (!text || !isdigit((unsigned char)*text))
        return -1;
    char *end;
    errno = 0;
    double number = strtod(text, &end);
    if (errno || end == text || !isfinite(number) || strncasecmp(text, "0x", 2) == 0)
        return -1;
    while (*end == ' ')
        end++;
    double scale = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': scale = 1024.0; end++; break;
    case 'M': scale = 1024.0 * 1024; end++; break;
    case 'G': scale = 1024.0 * 1024 * 1024; end++; break;
    case 'T': scale = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'I')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    double bytes = number * scale;
    /* Past 2^63 (or NaN from "nan") the conversion to long long is undefined behaviour. */
    if (*end || !(bytes < 0x1p63))
        return -1;
    return (long long)bytes;
}

void limits_format_size(long long bytes, char *out, size_t size)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double value = (double)bytes;
    int unit = 0;
    while (value >= 1024 && unit < 4 && ((long long)value % 1024 == 0 || value >= 10 * 1024)) {
        value /= 1024;
        unit++;
    }
    if (value == (long long)value)
        snprintf(out, size, "%lld %s", (long long)value, units[unit]);
    else
        snprintf(out, size, "%.1f %s", value, units[unit]);
}

typedef enum field_kind { FIELD_SIZE, FIELD_INT, FIELD_CPUS } field_kind;

/* Every limit but network (a yes/no that needs no parsing), with its names: how a request asks
   for it, and how the daemon writes it out (limits_to_json). */
typedef struct field {
    const char *name;      /* a request's key; env KERNEL_CELLBOX_<NAME> */
    const char *json_name; /* written out: GET /v1/sandboxes' "limits", the registry's records */
    const char *earlier_json_name; /* how records written before 2026-11-25 spelled it, or NULL */
    field_kind kind;
    size_t offset;
    double minimum;        /* 0: any positive value */
    unsigned flag;         /* its limits_field */
} field;

static const field fields[] = {
    {"memory", "memory_bytes", NULL, FIELD_SIZE, offsetof(sandbox_limits, memory_bytes),
     (double)LIMITS_MIN_MEMORY_BYTES, LIMITS_MEMORY},
    {"pids", "pids", NULL, FIELD_INT, offsetof(sandbox_limits, pids), 0, LIMITS_PIDS},
    {"cpus", "cpus", NULL, FIELD_CPUS, offsetof(sandbox_limits, cpus), 0, LIMITS_CPUS},
    {"disk", "disk_bytes", NULL, FIELD_SIZE, offsetof(sandbox_limits, disk_bytes), 0, LIMITS_DISK},
    {"open_files", "open_files", NULL, FIELD_INT, offsetof(sandbox_limits, open_files), 0,
     LIMITS_OPEN_FILES},
    {"timeout", "timeout_s", "timeout_seconds", FIELD_INT, offsetof(sandbox_limits, timeout_seconds),
     0, LIMITS_TIMEOUT},
    {"output", "output_bytes", NULL, FIELD_SIZE, offsetof(sandbox_limits, output_bytes), 0,
     LIMITS_OUTPUT},
};

#define FIELD_COUNT (sizeof fields / sizeof fields[0])

static double value_of(const sandbox_limits *limits, const field *f)
{
    const char *base = (const char *)limits + f->offset;
    switch (f->kind) {
    case FIELD_SIZE: return (double)*(const long long *)base;
    case FIELD_INT: return *(const int *)base;
    case FIELD_CPUS: return *(const double *)base;
    }
    return 0;
}

static void store(sandbox_limits *limits, const field *f, double value)
{
    char *base = (char *)limits + f->offset;
    switch (f->kind) {
    case FIELD_SIZE: *(long long *)base = (long long)value; break;
    case FIELD_INT: *(int *)base = (int)value; break;
    case FIELD_CPUS: *(double *)base = value; break;
    }
}

/* A JSON number or string ("512M"), or an env string. Returns -1 when malformed. */
static double parse_value(const field *f, json_t *value)
{
    if (json_is_number(value))
        return json_number_value(value);
    const char *text = json_string_value(value);
    if (!text)
        return -1;
    if (f->kind == FIELD_SIZE)
        return (double)limits_parse_size(text);
    if (!isdigit((unsigned char)*text) || strncasecmp(text, "0x", 2) == 0)
        return -1;
    char *end;
    double number = strtod(text, &end);
    /* "nan" and "inf" parse too: NaN would pass every range check below. */
    return (end == text || *end || !isfinite(number)) ? -1 : number;
}

static int apply_field(const field *f, json_t *value, const char *source, const sandbox_limits *maxima,
                       sandbox_limits *out, char *why, size_t why_size)
{
    double number = parse_value(f, value);
    bool positive_needed = f->kind != FIELD_INT || strcmp(f->name, "timeout") != 0;
    /* An int field past INT_MAX would be stored out of range (undefined behaviour) where the
       daemon sets no maximum (--max-execution-timeout 0). */
    double ceiling = f->kind == FIELD_INT ? INT_MAX : 1e15;
    if (number < 0 || (positive_needed && number <= 0) || number > ceiling) {
        snprintf(why, why_size, "%s must be a positive %s", source,
                 f->kind == FIELD_SIZE ? "size like \"512M\" or a number of bytes" : "number");
        return -1;
    }
    if (number < f->minimum) {
        char text[64];
        limits_format_size((long long)f->minimum, text, sizeof text);
        snprintf(why, why_size, "%s must be at least %s (what a kernel needs to start)", source, text);
        return -1;
    }
    double maximum = value_of(maxima, f);
    if (maximum > 0 && number > maximum) {
        char text[64];
        if (f->kind == FIELD_SIZE)
            limits_format_size((long long)maximum, text, sizeof text);
        else
            snprintf(text, sizeof text, "%g", maximum);
        snprintf(why, why_size, "%s exceeds the daemon's maximum of %s", source, text);
        return -1;
    }
    store(out, f, number);
    return 0;
}

static int network_from_request(json_t *network, json_t *env, bool allowed, bool *out,
                                failure_kind *refusal, char *why, size_t why_size)
{
    const char *env_value = json_string_value(json_object_get(env, "KERNEL_CELLBOX_NETWORK"));
    bool env_wants = env_value && (!strcmp(env_value, "1") || !strcasecmp(env_value, "true"));
    bool wanted = json_is_true(network) || env_wants;
    if (network && !json_is_null(network) && !json_is_boolean(network)) {
        snprintf(why, why_size, "'network' must be true or false");
        return -1;
    }
    /* A misspelt yes ("yes", "on") would otherwise give a sandbox without network, silently. */
    if (env_value && !env_wants && *env_value && strcmp(env_value, "0") != 0 &&
        strcasecmp(env_value, "false") != 0) {
        snprintf(why, why_size, "env KERNEL_CELLBOX_NETWORK must be 1 or true (0 or false: no "
                 "network), not '%.40s'", env_value);
        return -1;
    }
    if (wanted && !allowed) {
        *refusal = FAILURE_FORBIDDEN;
        snprintf(why, why_size, "network access is disabled on this daemon; start cellboxd with "
                 "--allow-network to let sandboxes ask for it");
        return -1;
    }
    *out = wanted;
    return 0;
}

int limits_from_request(json_t *limits, json_t *network, json_t *env,
                        const sandbox_limits *defaults, const sandbox_limits *maxima,
                        bool network_allowed, sandbox_limits *out, failure_kind *refusal,
                        char *why, size_t why_size)
{
    *refusal = FAILURE_INVALID;
    *out = *defaults;
    out->network = false;
    if (limits && !json_is_null(limits) && !json_is_object(limits)) {
        snprintf(why, why_size, "'limits' must be an object like {\"memory\": \"512M\"}");
        return -1;
    }
    for (size_t i = 0; i < FIELD_COUNT; i++) {
        const field *f = &fields[i];
        char env_name[64], source[96];
        snprintf(env_name, sizeof env_name, "KERNEL_CELLBOX_");
        for (size_t j = 0; f->name[j]; j++)
            env_name[15 + j] = (char)toupper((unsigned char)f->name[j]), env_name[16 + j] = '\0';
        json_t *from_env = json_object_get(env, env_name);
        json_t *from_body = json_object_get(limits, f->name);
        if (from_env) {
            snprintf(source, sizeof source, "env %s", env_name);
            if (apply_field(f, from_env, source, maxima, out, why, why_size) < 0)
                return -1;
        }
        if (from_body) {
            snprintf(source, sizeof source, "limits.%s", f->name);
            if (apply_field(f, from_body, source, maxima, out, why, why_size) < 0)
                return -1;
        }
    }
    if (network_from_request(network, env, network_allowed, &out->network, refusal, why,
                             why_size) < 0)
        return -1;
    const char *key;
    json_t *value;
    json_object_foreach(limits, key, value)
    {
        bool known = false;
        for (size_t i = 0; i < FIELD_COUNT; i++)
            known |= strcmp(fields[i].name, key) == 0;
        if (!known) {
            snprintf(why, why_size, "unknown limit 'limits.%.40s' (known: memory, pids, cpus, disk, "
                     "open_files, timeout, output)", key);
            return -1;
        }
    }
    return 0;
}

json_t *limits_to_json(const sandbox_limits *limits)
{
    json_t *object = json_object();
    for (size_t i = 0; i < FIELD_COUNT; i++) {
        const field *f = &fields[i];
        const char *base = (const char *)limits + f->offset;
        json_t *value = f->kind == FIELD_SIZE ? json_integer(*(const long long *)base)
                        : f->kind == FIELD_INT ? json_integer(*(const int *)base)
                                               : json_real(*(const double *)base);
        json_object_set_new(object, f->json_name, value);
    }
    json_object_set_new(object, "network", json_boolean(limits->network));
    return object;
}

json_t *limits_to_request(const sandbox_limits *limits)
{
    json_t *request = json_object();
    for (size_t i = 0; i < FIELD_COUNT; i++) {
        const field *f = &fields[i];
        double value = value_of(limits, f);
        if (value > 0)
            json_object_set_new(request, f->name,
                                f->kind == FIELD_CPUS ? json_real(value)
                                                      : json_integer((json_int_t)value));
    }
    return request;
}

sandbox_limits limits_from_json(json_t *object)
{
    sandbox_limits limits = {.network = json_is_true(json_object_get(object, "network"))};
    for (size_t i = 0; i < FIELD_COUNT; i++) {
        const field *f = &fields[i];
        json_t *value = json_object_get(object, f->json_name);
        /* a sandbox a daemon of before the rename left running is still adopted whole */
        if (!value && f->earlier_json_name)
            value = json_object_get(object, f->earlier_json_name);
        char *base = (char *)&limits + f->offset;
        switch (f->kind) {
        case FIELD_SIZE: *(long long *)base = json_integer_value(value); break;
        case FIELD_INT: *(int *)base = (int)json_integer_value(value); break;
        case FIELD_CPUS: *(double *)base = json_number_value(value); break;
        }
    }
    return limits;
}

bool limits_equal(const sandbox_limits *a, const sandbox_limits *b, unsigned which)
{
    for (size_t i = 0; i < FIELD_COUNT; i++)
        if ((which & fields[i].flag) && value_of(a, &fields[i]) != value_of(b, &fields[i]))
            return false;
    return !(which & LIMITS_NETWORK) || a->network == b->network;
}
