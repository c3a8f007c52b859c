/* ids — random identifiers from OpenSSL's CSPRNG: kernel/session ids (uuid4) and tokens. */
#ifndef CELLBOX_COMMON_IDS_H
#define CELLBOX_COMMON_IDS_H

#include <stdbool.h>

#define UUID_STRING_LENGTH 36

void id_uuid4(char out[UUID_STRING_LENGTH + 1]);
void id_random_hex(char *out, int bytes); /* out must hold 2*bytes+1 */
bool id_is_uuid(const char *text);        /* the canonical 8-4-4-4-12 lowercase or uppercase hex form */

#endif
