/* envd_access — who may call into a sandbox's envd without the daemon's token: the sandbox's
 * own envd access token, and E2B's signed file URLs.
 *
 * Each sandbox has its own access token, HMAC-SHA256 of its id under the daemon's token (a
 * random key when the daemon runs without one), handed to the SDK as envdAccessToken: it
 * admits calls into that sandbox only (X-Access-Token with E2b-Sandbox-Id naming it), and no
 * sandbox can derive it, or another's, without the daemon's token, which none is given. The
 * SDK signs file URLs with it (uploadUrl, downloadUrl): "v1_" + base64(sha256(
 * "path:operation:user:token[:expiration]")), unpadded, in ?signature= and
 * ?signature_expiration=. Such a URL names no sandbox (with E2B_SANDBOX_URL it reaches the
 * daemon's own address, with no E2B header), so the signature itself identifies the sandbox:
 * it is checked against each sandbox's token (constant-time compares). */
#ifndef CELLBOX_API_ENVD_ACCESS_H
#define CELLBOX_API_ENVD_ACCESS_H

#include <stdbool.h>

#include "http/server.h"
#include "model/box.h"

#define ENVD_ACCESS_TOKEN_SIZE 68 /* "ea_" + 64 hex digits + NUL */

/* Called once at start, before the server: the daemon's token ("" = none). */
void envd_access_init(const char *daemon_token);
void envd_access_token(const box *b, char out[ENVD_ACCESS_TOKEN_SIZE]);
/* The server's `admits` hook: X-Access-Token is the token of the sandbox E2b-Sandbox-Id names
   (or has a token's form and names a sandbox that is gone: the route answers 502, which the
   SDK reads as "not running"), or the request is a signed GET or POST /files (checked in full
   by envd_access_check_signed before anything is read or written). */
bool envd_access_admits(const http_request *request);
/* Does the request carry ?signature= (a signed file URL)? */
bool envd_access_is_signed(const http_request *request);
/* A signed file request: the sandbox whose token signed it for `operation` ("read", "write"),
   `b` itself when the request named one, NULL after answering 401 in E2B's shape (a signature
   that matches no sandbox, or one past its signature_expiration). */
box *envd_access_check_signed(http_request *request, box *b, const char *operation);

#endif
