/*
 * jline.h: one JSON object on one line, for the benches' machine-readable output.
 *
 *   jline j;
 *   jl_init(&j);
 *   jl_str(&j, "backend", "host"); jl_u64(&j, "ids", n); jl_num(&j, "hit_ratio", h);
 *   jl_end(&j);            -> {"backend":"host","ids":123,"hit_ratio":0.95}\n in j.buf
 *
 * Strings are escaped; non-finite numbers are written as null. Output that would overflow
 * the buffer is cut off and marks the line truncated (jl_end then returns -1).
 */
#ifndef EMC_BENCH_JLINE_H
#define EMC_BENCH_JLINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct jline {
  char buf[8192];
  size_t len;
  int first;     /* no key written yet */
  int truncated; /* something did not fit */
} jline;

void jl_init(jline *j);
/* printf-style raw text (no escaping). */
void jl_raw(jline *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "key": with the separating comma; the value follows. */
void jl_key(jline *j, const char *key);
void jl_str(jline *j, const char *key, const char *v);
void jl_u64(jline *j, const char *key, uint64_t v);
void jl_num(jline *j, const char *key, double v);
void jl_bool(jline *j, const char *key, int v);
/* Closes the object and the line; 0, or -1 if the line was truncated. */
int jl_end(jline *j);

/* Once a bench has written its lines: flushes stdout and closes out_file (the --out file named
 * out_name; NULL for none), saying on stderr, as `who`, which of them lost lines (their write
 * errors stick to the stream). 1 when one did: the run must not exit 0 (the benches' 74). */
int jl_results_lost(FILE *out_file, const char *out_name, const char *who);

#endif
