#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static enum log_level current_level = LOG_INFO;
static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_set_level(enum log_level level) { current_level = level; }

int log_parse_level(const char *name, enum log_level *out)
{
    for (int i = LOG_DEBUG; i <= LOG_ERROR; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return -1;
}

static void log_vwrite(enum log_level level, const char *fmt, va_list ap)
{
    struct timespec now;
    struct tm tm;
    char stamp[32];
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    fprintf(stderr, "[%s.%03ldZ %s] ", stamp, now.tv_nsec / 1000000, level_names[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void log_message(enum log_level level, const char *fmt, ...)
{
    if (level < current_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level, fmt, ap);
    va_end(ap);
}

void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("cellboxd: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}
