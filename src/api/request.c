#include "api/request.h"

#include <stdio.h>
#include <string.h>

#include "common/text.h"

static json_t *parse_object(http_request *request)
{
    size_t length;
    const char *text = http_body(request, &length);
    if (length == 0)
        return json_object();
    json_error_t error;
    json_t *body = json_loadb(text, length, 0, &error);
    if (!body) {
        text_scrub_utf8(error.text); /* it quotes the body near the error */
        http_respond_error(request, 400, "request body is not valid JSON: %s (line %d, column %d)",
                           error.text, error.line, error.column);
        return NULL;
    }
    if (!json_is_object(body)) {
        json_decref(body);
        http_respond_error(request, 400, "request body must be a JSON object");
        return NULL;
    }
    return body;
}

static bool is_allowed(const char *field, const char *const *allowed_fields)
{
    for (size_t i = 0; allowed_fields[i]; i++)
        if (strcmp(field, allowed_fields[i]) == 0)
            return true;
    return false;
}

/* A client that misspells a field learns it at once, with the right spellings beside it. */
static void respond_unknown_field(http_request *request, const char *field,
                                  const char *const *allowed_fields)
{
    char list[512] = "";
    for (size_t i = 0; allowed_fields[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 allowed_fields[i]);
    http_respond_error(request, 400, "unknown field '%s' (known: %s)", field,
                       *list ? list : "none");
}

json_t *request_parse_body(http_request *request, const char *const *allowed_fields)
{
    json_t *body = parse_object(request);
    if (!body || allowed_fields == REQUEST_ANY_FIELD)
        return body;
    const char *key;
    json_t *value;
    json_object_foreach(body, key, value)
    {
        if (!is_allowed(key, allowed_fields)) {
            respond_unknown_field(request, key, allowed_fields);
            json_decref(body);
            return NULL;
        }
    }
    return body;
}

bool request_optional_string(http_request *request, json_t *body, const char *field,
                             const char **out)
{
    json_t *value = json_object_get(body, field);
    if (!value || json_is_null(value))
        return true;
    if (!json_is_string(value)) {
        http_respond_error(request, 400, "'%s' must be a string", field);
        return false;
    }
    *out = json_string_value(value);
    return true;
}

bool request_optional_int(http_request *request, json_t *body, const char *field, int minimum,
                          int *out)
{
    json_t *value = json_object_get(body, field);
    if (!value || json_is_null(value))
        return true;
    double number = json_is_integer(value) ? (double)json_integer_value(value)
                    : json_is_real(value)  ? json_real_value(value)
                                           : -1e300;
    /* the range first: converting a number past long long (1e300) is undefined behaviour */
    if (!json_is_number(value) || number < minimum || number > REQUEST_MAX_INT ||
        number != (double)(long long)number) {
        http_respond_error(request, 400, "'%s' must be a whole number from %d to %d", field,
                           minimum, REQUEST_MAX_INT);
        return false;
    }
    *out = (int)number;
    return true;
}

bool request_optional_bool(http_request *request, json_t *body, const char *field, bool *out)
{
    json_t *value = json_object_get(body, field);
    if (!value || json_is_null(value))
        return true;
    if (!json_is_boolean(value)) {
        http_respond_error(request, 400, "'%s' must be true or false", field);
        return false;
    }
    *out = json_is_true(value);
    return true;
}

bool request_optional_string_map(http_request *request, json_t *body, const char *field,
                                 json_t **out)
{
    json_t *value = json_object_get(body, field);
    if (!value || json_is_null(value))
        return true;
    if (!json_is_object(value)) {
        http_respond_error(request, 400, "'%s' must be an object of strings", field);
        return false;
    }
    const char *key;
    json_t *item;
    json_object_foreach(value, key, item)
    {
        if (!json_is_string(item)) {
            http_respond_error(request, 400, "'%s.%s' must be a string", field, key);
            return false;
        }
        if (!*key || strchr(key, '=') || strlen(key) > 255) {
            http_respond_error(request, 400, "'%s' has an invalid name '%.*s'", field,
                               text_utf8_prefix(key, 64), key);
            return false;
        }
    }
    *out = value;
    return true;
}

bool request_optional_strings(http_request *request, json_t *object, const char *const *fields)
{
    for (; *fields; fields++) {
        const char *ignored;
        if (!request_optional_string(request, object, *fields, &ignored))
            return false;
    }
    return true;
}
