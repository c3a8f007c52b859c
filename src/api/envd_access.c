#include "api/envd_access.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/errors.h"
#include "common/log.h"
#include "model/manager.h"

#define SIGNATURE_SIZE 48 /* "v1_" + 43 base64 characters + NUL */

static unsigned char access_key[SHA256_DIGEST_LENGTH];

void envd_access_init(const char *daemon_token)
{
    if (*daemon_token) /* the same tokens after a restart with the same --token */
        SHA256((const unsigned char *)daemon_token, strlen(daemon_token), access_key);
    else if (RAND_bytes(access_key, sizeof access_key) != 1)
        die("cannot draw a random key for envd access tokens");
}

void envd_access_token(const box *b, char out[ENVD_ACCESS_TOKEN_SIZE])
{
    unsigned char mac[SHA256_DIGEST_LENGTH];
    unsigned int length = 0;
    char message[160];
    int n = snprintf(message, sizeof message, "envd access token for sandbox %s", box_id(b));
    HMAC(EVP_sha256(), access_key, sizeof access_key, (const unsigned char *)message, (size_t)n,
         mac, &length);
    memcpy(out, "ea_", 3);
    for (unsigned i = 0; i < SHA256_DIGEST_LENGTH; i++)
        snprintf(out + 3 + 2 * i, 3, "%02x", mac[i]);
}

static bool same_text(const char *a, const char *b)
{
    size_t n = strlen(b);
    return strlen(a) == n && CRYPTO_memcmp(a, b, n) == 0;
}

static bool token_matches(const box *b, const char *given)
{
    char token[ENVD_ACCESS_TOKEN_SIZE];
    envd_access_token(b, token);
    return same_text(given, token);
}

bool envd_access_is_signed(const http_request *request)
{
    return http_query(request, "signature") != NULL;
}

static bool is_file_transfer(const http_request *request)
{
    return strcmp(http_path(request), "/files") == 0 &&
           (http_method_is(request, "GET") || http_method_is(request, "POST"));
}

/* "ea_" and 64 hex digits: what envd_access_token makes. */
static bool looks_like_access_token(const char *given)
{
    return strlen(given) == ENVD_ACCESS_TOKEN_SIZE - 1 && strncmp(given, "ea_", 3) == 0 &&
           strspn(given + 3, "0123456789abcdef") == ENVD_ACCESS_TOKEN_SIZE - 4;
}

bool envd_access_admits(const http_request *request)
{
    const char *id = http_header(request, "E2b-Sandbox-Id");
    const char *given = http_header(request, "X-Access-Token");
    box *b = id ? box_find(id) : NULL;
    if (b && given && token_matches(b, given))
        return true;
    /* A sandbox that is gone: the SDK asks envd's /health with its token to learn that
       (Sandbox.isRunning), and reads the route's 502 as "not running". Nothing is served. */
    if (id && !b && given && looks_like_access_token(given))
        return true;
    return is_file_transfer(request) && envd_access_is_signed(request);
}

/* The signature the SDK's getSignature computes with b's token. */
static void expected_signature(const box *b, const char *path, const char *operation,
                               const char *user, const char *expiration,
                               char out[SIGNATURE_SIZE])
{
    char token[ENVD_ACCESS_TOKEN_SIZE];
    envd_access_token(b, token);
    size_t size = strlen(path) + strlen(operation) + strlen(user) + strlen(token) +
                  (expiration ? strlen(expiration) : 0) + 8;
    char *raw = malloc(size);
    if (!raw)
        die("out of memory");
    int n = expiration ? snprintf(raw, size, "%s:%s:%s:%s:%s", path, operation, user, token,
                                  expiration)
                       : snprintf(raw, size, "%s:%s:%s:%s", path, operation, user, token);
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)raw, (size_t)n, digest);
    free(raw);
    unsigned char encoded[48];
    int length = EVP_EncodeBlock(encoded, digest, sizeof digest);
    while (length > 0 && encoded[length - 1] == '=')
        length--; /* the SDK strips base64's padding */
    snprintf(out, SIGNATURE_SIZE, "v1_%.*s", length, (const char *)encoded);
}

static bool signed_by(const box *b, const http_request *request, const char *operation)
{
    const char *path = http_query(request, "path");
    const char *user = http_query(request, "username");
    char expected[SIGNATURE_SIZE];
    expected_signature(b, path ? path : "", operation, user ? user : "",
                       http_query(request, "signature_expiration"), expected);
    return same_text(http_query(request, "signature"), expected);
}

/* The sandbox whose token made this signature: every one is tried, so the time taken does not
   tell which. */
static box *find_signer(const http_request *request, const char *operation)
{
    box *found = NULL;
    for (size_t i = 0; i < manager_count(); i++) {
        box *candidate = box_of(manager_at(i));
        if (signed_by(candidate, request, operation) && !found)
            found = candidate;
    }
    return found;
}

/* signature_expiration: Unix seconds, as the SDK writes them; false if it is no such number. */
static bool parse_expiration(const char *text, long long *out)
{
    char *end;
    *out = strtoll(text, &end, 10);
    return *text && !*end;
}

box *envd_access_check_signed(http_request *request, box *b, const char *operation)
{
    box *signer = b ? (signed_by(b, request, operation) ? b : NULL) : find_signer(request, operation);
    const char *expiration = http_query(request, "signature_expiration");
    long long expires_at;
    if (!signer) {
        errors_respond_e2b(request, 401,
                           "invalid signature: it does not match the %s of this path and user "
                           "by any sandbox's access token; get a new URL from the SDK "
                           "(uploadUrl, downloadUrl)",
                           operation);
        return NULL;
    }
    if (expiration && !parse_expiration(expiration, &expires_at)) {
        errors_respond_e2b(request, 401,
                           "signature_expiration '%.40s' is not a time in Unix seconds", expiration);
        return NULL;
    }
    if (expiration && expires_at < (long long)time(NULL)) {
        char when[64];
        time_t at = (time_t)expires_at;
        struct tm tm;
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&at, &tm));
        errors_respond_e2b(request, 401,
                           "signature is already expired (at %s, signature_expiration=%lld): "
                           "get a new URL from the SDK",
                           when, expires_at);
        return NULL;
    }
    return signer;
}
