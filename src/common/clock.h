/* clock — wall-clock and monotonic time, and the timestamp format Jupyter clients parse. */
#ifndef CELLBOX_COMMON_CLOCK_H
#define CELLBOX_COMMON_CLOCK_H

#include <jansson.h>
#include <stdint.h>

#define ISO_TIME_LENGTH 27 /* 2024-03-12T17:51:18.123456Z */
#define ISO_TIME_BUFFER 32

int64_t clock_wall_us(void);      /* microseconds since the epoch */
int64_t clock_monotonic_ms(void); /* for timers and durations */
int64_t clock_monotonic_us(void); /* for durations reported to a tenth of a millisecond */
/* Jupyter Server's GatewayClient parses last_activity with %Y-%m-%dT%H:%M:%S.%fZ: always six
   fractional digits and a trailing Z. */
void clock_format_iso(int64_t wall_us, char out[ISO_TIME_BUFFER]);
/* The same as a JSON string; JSON null for 0 ("not yet", "never"). */
json_t *clock_iso_json(int64_t wall_us);

#endif
