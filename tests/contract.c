/* contract.c: documented vs observed statuses of the public calls (see contract.h). */
#include "contract.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef EMC_HEADER_PATH
#error "EMC_HEADER_PATH (the path of include/embcache.h) must be defined by the build"
#endif

#define MAX_FNS 64

typedef struct fn_entry {
  char name[64];
  unsigned documented;    /* 1u << status, EMC_OK included */
  unsigned observed;      /* 1u << status */
  unsigned long calls;    /* recorded calls */
  char detail[16][160];   /* last detail per observed failing status */
} fn_entry;

static fn_entry g_fns[MAX_FNS];
static int g_n_fns, g_loaded;

static fn_entry *find(const char *name, int add) {
  int i;
  for (i = 0; i < g_n_fns; i++)
    if (strcmp(g_fns[i].name, name) == 0) return &g_fns[i];
  if (!add) return NULL;
  ck_assert_msg(g_n_fns < MAX_FNS, "contract: more than %d functions", MAX_FNS);
  snprintf(g_fns[g_n_fns].name, sizeof g_fns[g_n_fns].name, "%s", name);
  return &g_fns[g_n_fns++];
}

/* The status whose name is the EMC_E... token at p (length n), or -1. */
static int status_of(const char *p, size_t n) {
  static const struct {
    const char *name;
    int value;
  } all[] = {
#define X(nm, v, t) {#nm, v},
      EMC_STATUS_MAP(X)
#undef X
  };
  size_t i;
  for (i = 0; i < sizeof all / sizeof all[0]; i++)
    if (strlen(all[i].name) == n && strncmp(all[i].name, p, n) == 0) return all[i].value;
  return -1;
}

int emct_contract_load(void) {
  static const char decl[] = "EMC_API emc_status ";
  FILE *f;
  char *text;
  long size;
  const char *p;
  if (g_loaded) return g_n_fns;
  f = fopen(EMC_HEADER_PATH, "rb");
  ck_assert_msg(f != NULL, "contract: cannot open %s", EMC_HEADER_PATH);
  fseek(f, 0, SEEK_END);
  size = ftell(f);
  fseek(f, 0, SEEK_SET);
  text = malloc((size_t)size + 1);
  ck_assert(text != NULL);
  ck_assert(fread(text, 1, (size_t)size, f) == (size_t)size);
  text[size] = 0;
  fclose(f);
  for (p = strstr(text, decl); p; p = strstr(p + 1, decl)) {
    const char *name = p + sizeof decl - 1, *end = strchr(name, '('), *c_end, *c_beg, *q;
    char nm[64];
    fn_entry *e;
    ck_assert_msg(end && (size_t)(end - name) < sizeof nm, "contract: bad declaration");
    memcpy(nm, name, (size_t)(end - name));
    nm[end - name] = 0;
    /* the comment must end right above the declaration */
    for (c_end = p; c_end > text && (c_end[-1] == ' ' || c_end[-1] == '\n'); c_end--) {}
    ck_assert_msg(c_end - text >= 2 && c_end[-1] == '/' && c_end[-2] == '*',
                  "contract: %s has no doc comment right above it", nm);
    for (c_beg = c_end - 2; c_beg > text && !(c_beg[0] == '/' && c_beg[1] == '*'); c_beg--) {}
    e = find(nm, 1);
    e->documented = 1u << EMC_OK;
    for (q = c_beg; q < c_end; q++) {
      if (strncmp(q, "EMC_E", 5) == 0) {
        size_t n = 5;
        int st;
        while ((q[n] >= 'A' && q[n] <= 'Z') || q[n] == '_') n++;
        st = status_of(q, n);
        ck_assert_msg(st >= 0, "contract: %s documents an unknown status %.*s", nm, (int)n, q);
        e->documented |= 1u << st;
        q += n - 1;
      }
    }
  }
  free(text);
  g_loaded = 1;
  return g_n_fns;
}

unsigned emct_contract_documented(const char *fn) {
  fn_entry *e;
  emct_contract_load();
  e = find(fn, 0);
  return e ? e->documented : 0;
}

emc_status emct_record(const char *fn, emc_status st) {
  fn_entry *e;
  emct_contract_load();
  e = find(fn, 0);
  ck_assert_msg(e != NULL, "contract: %s is not an emc_status function of embcache.h", fn);
  ck_assert_msg((unsigned)st < 16, "contract: %s returned %d, not a status", fn, (int)st);
  e->calls++;
  e->observed |= 1u << st;
  if (st != EMC_OK) snprintf(e->detail[st], sizeof e->detail[st], "%s", emc_last_error_detail());
  return st;
}

void emct_contract_check(int verbose) {
  int i, s;
  emct_contract_load();
  for (i = 0; i < g_n_fns; i++) {
    fn_entry *e = &g_fns[i];
    if (verbose && e->calls) {
      printf("  %-26s %7lu calls:", e->name, e->calls);
      for (s = 0; s < 16; s++)
        if (e->observed >> s & 1u) printf(" %s", emc_status_name((emc_status)s));
      printf("\n");
    }
    for (s = 0; s < 16; s++)
      ck_assert_msg(!(e->observed >> s & 1u) || (e->documented >> s & 1u),
                    "contract: %s returned %s, which its declaration in embcache.h does not "
                    "list (detail: %s)",
                    e->name, emc_status_name((emc_status)s), e->detail[s]);
  }
}

void emct_contract_reset(void) {
  int i;
  for (i = 0; i < g_n_fns; i++) {
    g_fns[i].observed = 0;
    g_fns[i].calls = 0;
  }
}
