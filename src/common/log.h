/* log — leveled logging to stderr, and die() for errors that end the program. */
#ifndef CELLBOX_COMMON_LOG_H
#define CELLBOX_COMMON_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

void log_set_level(enum log_level level);
int log_parse_level(const char *name, enum log_level *out); /* 0 on success */
void log_message(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#define log_debug(...) log_message(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_message(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_message(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_message(LOG_ERROR, __VA_ARGS__)

#endif
