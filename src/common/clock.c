#include "common/clock.h"

#include <stdio.h>
#include <time.h>

int64_t clock_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t clock_monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t clock_monotonic_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void clock_format_iso(int64_t wall_us, char out[ISO_TIME_BUFFER])
{
    time_t seconds = (time_t)(wall_us / 1000000);
    struct tm tm;
    gmtime_r(&seconds, &tm);
    char seconds_part[24];
    strftime(seconds_part, sizeof seconds_part, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, ISO_TIME_BUFFER, "%.19s.%06dZ", seconds_part, (int)(wall_us % 1000000));
}

json_t *clock_iso_json(int64_t wall_us)
{
    if (wall_us == 0)
        return json_null();
    char text[ISO_TIME_BUFFER];
    clock_format_iso(wall_us, text);
    return json_string(text);
}
