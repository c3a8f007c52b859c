/* check — a minimal assertion harness for the C unit tests (TAP-style lines, one summary). */
#ifndef CELLBOX_TESTS_CHECK_H
#define CELLBOX_TESTS_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (cond) {                                                                        \
            check_passed++;                                                                \
        } else {                                                                           \
            check_failed++;                                                                \
            printf("not ok - %s:%d: %s\n", __FILE__, __LINE__, #cond);                      \
        }                                                                                  \
    } while (0)

#define CHECK_STR(actual, expected)                                                        \
    do {                                                                                   \
        const char *a_ = (actual), *e_ = (expected);                                       \
        if (a_ && e_ && strcmp(a_, e_) == 0) {                                             \
            check_passed++;                                                                \
        } else {                                                                           \
            check_failed++;                                                                \
            printf("not ok - %s:%d: '%s' != '%s'\n", __FILE__, __LINE__, a_ ? a_ : "(null)", \
                   e_ ? e_ : "(null)");                                                    \
        }                                                                                  \
    } while (0)

#define RUN(test)                                                                          \
    do {                                                                                   \
        int before_ = check_failed;                                                        \
        test();                                                                            \
        printf("%s - %s\n", check_failed == before_ ? "ok" : "not ok", #test);             \
    } while (0)

static inline int check_summary(const char *suite)
{
    printf("# %s: %d checks passed, %d failed\n", suite, check_passed, check_failed);
    return check_failed ? 1 : 0;
}

#endif
