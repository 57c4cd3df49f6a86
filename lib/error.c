/* error.c: status names and texts, the thread-local failure detail. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

unsigned emc_version(void) { return EMC_VERSION_NUMBER; }
const char *emc_version_string(void) { return EMC_VERSION_STRING; }

const char *emc_strerror(emc_status s) {
  switch (s) {
#define EMC__STATUS_TEXT(name, value, text) \
  case name:                                \
    return text;
    EMC_STATUS_MAP(EMC__STATUS_TEXT)
#undef EMC__STATUS_TEXT
  }
  return "unknown status";
}

const char *emc_status_name(emc_status s) {
  switch (s) {
#define EMC__STATUS_NAME(name, value, text) \
  case name:                                \
    return #name;
    EMC_STATUS_MAP(EMC__STATUS_NAME)
#undef EMC__STATUS_NAME
  }
  return "EMC_UNKNOWN";
}

static _Thread_local char emc__detail[512];

const char *emc_last_error_detail(void) { return emc__detail; }

emc_status emc__fail(emc_status st, const char *func, const char *file, int line,
                     const char *fmt, ...) {
  va_list ap;
  int n = snprintf(emc__detail, sizeof emc__detail, "%s: ", func);
  if (n < 0 || (size_t)n >= sizeof emc__detail) n = 0;
  va_start(ap, fmt);
  vsnprintf(emc__detail + n, sizeof emc__detail - (size_t)n, fmt, ap);
  va_end(ap);
#ifndef NDEBUG
  {
    size_t len = strlen(emc__detail);
    if (len + 2 < sizeof emc__detail) snprintf(emc__detail + len, sizeof emc__detail - len, " [%s:%d]", file, line);
  }
#else
  (void)file;
  (void)line;
#endif
  return st;
}

#ifdef EMC_TEST_HOOKS
/* The test points' hook (lib/item/access.h, "test points"): set by tests, NULL otherwise. */
void (*emc__tp_hook)(int kind, const char *what);
/* lib/internal.h: set by tests, 0 otherwise. */
int emc__fail_thread_start;
#endif
