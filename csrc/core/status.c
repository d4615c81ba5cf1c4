/* status.c -- status names and the thread-local message of the last failure.
 *
 * Errors are values: every C entry point returns a gc_status, and gc_fail() records a
 * precise message (argument names and shapes) that the Python boundary turns into
 * the exception text. Thread-local so that concurrent calls never mix messages. */
#include "gpucmp.h"

#include <stdarg.h>
#include <stdio.h>

#if defined(_MSC_VER)
#define GC_THREAD_LOCAL __declspec(thread)
#else
#define GC_THREAD_LOCAL _Thread_local
#endif

static GC_THREAD_LOCAL char last_error[1024];

const char *gc_status_name(gc_status s)
{
    switch (s) {
    case GC_OK: return "ok";
    case GC_ERR_INVALID_ARG: return "invalid argument";
    case GC_ERR_DTYPE: return "unsupported dtype";
    case GC_ERR_NOMEM: return "out of memory";
    case GC_ERR_UNSUPPORTED: return "unsupported operation";
    case GC_ERR_BACKEND: return "backend failure";
    case GC_ERR_NONFINITE: return "non-finite value";
    }
    return "unknown status";
}

const char *gc_last_error(void) { return last_error; }

void gc_clear_error(void) { last_error[0] = '\0'; }

gc_status gc_fail(gc_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}
