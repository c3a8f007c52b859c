/* results — an execution's `result` events: the text of the cell's value is shown, and rich
 * outputs (PNG, JPEG, SVG, HTML, PDF) are saved as result-<execution count>-<n>.<ext>.
 *
 * The execution count arrives in its own event, which may come after the results: results
 * that carry files wait until it is known (or until the stream ends). */
#ifndef CELLBOX_CLI_RESULTS_H
#define CELLBOX_CLI_RESULTS_H

#include <jansson.h>
#include <stdbool.h>

typedef struct results {
    const char *directory;     /* where files go; NULL = the current directory */
    long long execution_count; /* 0 until the number_of_executions event */
    int saved;                 /* results saved so far: the next one's <n> is saved + 1 */
    json_t *waiting;           /* results with files, held until the execution count is known */
    bool failed;               /* a file could not be written */
} results;

void results_begin(results *r, const char *directory);
/* Shows the result's text (the cell's value, or a display without a file form) on stdout and
   saves its files (not with --json: the JSON carries them). */
void results_take(results *r, json_t *result);
void results_number(results *r, long long execution_count);
/* Saves what still waits; false if any file could not be written (already reported). */
bool results_end(results *r);

#endif
