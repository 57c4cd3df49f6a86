/* jline.c: see jline.h. */
#include "jline.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

void jl_init(jline *j) {
  j->len = 0;
  j->first = 1;
  j->truncated = 0;
  jl_raw(j, "{");
}

void jl_raw(jline *j, const char *fmt, ...) {
  va_list ap;
  int n;
  if (j->len >= sizeof j->buf - 1) {
    j->truncated = 1;
    return;
  }
  va_start(ap, fmt);
  n = vsnprintf(j->buf + j->len, sizeof j->buf - j->len, fmt, ap);
  va_end(ap);
  if (n < 0) {
    j->truncated = 1;
  } else if ((size_t)n >= sizeof j->buf - j->len) {
    j->truncated = 1;
    j->len = sizeof j->buf - 1;
  } else {
    j->len += (size_t)n;
  }
}

void jl_key(jline *j, const char *key) {
  jl_raw(j, "%s\"%s\":", j->first ? "" : ",", key);
  j->first = 0;
}

void jl_str(jline *j, const char *key, const char *v) {
  const unsigned char *p;
  jl_key(j, key);
  jl_raw(j, "\"");
  for (p = (const unsigned char *)(v ? v : ""); *p; p++) {
    if (*p == '"' || *p == '\\') jl_raw(j, "\\%c", *p);
    else if (*p < 0x20) jl_raw(j, "\\u%04x", *p);
    else jl_raw(j, "%c", *p);
  }
  jl_raw(j, "\"");
}

void jl_u64(jline *j, const char *key, uint64_t v) {
  jl_key(j, key);
  jl_raw(j, "%" PRIu64, v);
}

void jl_num(jline *j, const char *key, double v) {
  jl_key(j, key);
  if (isfinite(v)) jl_raw(j, "%.6g", v);
  else jl_raw(j, "null");
}

void jl_bool(jline *j, const char *key, int v) {
  jl_key(j, key);
  jl_raw(j, v ? "true" : "false");
}

int jl_end(jline *j) {
  jl_raw(j, "}\n");
  if (j->truncated) { /* keep the line a line */
    j->buf[sizeof j->buf - 2] = '\n';
    j->buf[sizeof j->buf - 1] = '\0';
  }
  return j->truncated ? -1 : 0;
}

int jl_results_lost(FILE *out_file, const char *out_name, const char *who) {
  int bad_out = 0, bad_stdout = fflush(stdout) != 0 || ferror(stdout);
  if (out_file) bad_out = ferror(out_file) | (fclose(out_file) != 0);
  if (bad_stdout) fprintf(stderr, "%s: writing the results to stdout failed\n", who);
  if (bad_out) fprintf(stderr, "%s: writing the results to %s failed\n", who, out_name);
  return bad_stdout || bad_out;
}
