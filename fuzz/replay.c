/*
 * replay.c: a main() for the fuzz targets without libFuzzer. Runs LLVMFuzzerTestOneInput once
 * per file named on the command line; a directory stands for every regular file in it
 * (sorted by name, not recursive). A property violation aborts, so a non-zero exit status
 * means a failing input (its name is printed before it runs when EMC_FUZZ_VERBOSE is set).
 * Exit status 0 with at least one input run; 2 on a usage or I/O error.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int verbose;

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  unsigned char *buf = NULL;
  size_t n = 0, cap = 0, got;
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return 0;
  }
  do {
    if (n == cap) {
      unsigned char *nb;
      cap = cap ? cap * 2 : 4096;
      nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        return 0;
      }
      buf = nb;
    }
    got = fread(buf + n, 1, cap - n, f);
    n += got;
  } while (got > 0);
  if (ferror(f)) {
    fclose(f);
    free(buf);
    fprintf(stderr, "replay: read error on %s\n", path);
    return 0;
  }
  fclose(f);
  if (verbose) fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
  /* a copy of exactly n bytes, so ASan sees reads past the input */
  {
    unsigned char *exact = malloc(n ? n : 1);
    if (!exact) {
      free(buf);
      return 0;
    }
    if (n) memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
  }
  return 1;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, size_t *runs) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char **names = NULL;
  size_t n = 0, cap = 0, i;
  int ok = 1;
  if (!d) {
    fprintf(stderr, "replay: cannot open directory %s\n", dir);
    return 0;
  }
  while ((e = readdir(d)) != NULL) {
    size_t len;
    char *p;
    struct stat sb;
    if (e->d_name[0] == '.') continue;
    len = strlen(dir) + strlen(e->d_name) + 2;
    p = malloc(len);
    if (!p) { ok = 0; break; }
    snprintf(p, len, "%s/%s", dir, e->d_name);
    if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) {
      free(p);
      continue;
    }
    if (n == cap) {
      char **nn;
      cap = cap ? cap * 2 : 64;
      nn = realloc(names, cap * sizeof *names);
      if (!nn) { free(p); ok = 0; break; }
      names = nn;
    }
    names[n++] = p;
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, cmp_str);
  for (i = 0; i < n; i++) {
    if (ok && run_file(names[i])) (*runs)++;
    else ok = 0;
    free(names[i]);
  }
  free(names);
  return ok;
}

int main(int argc, char **argv) {
  size_t runs = 0;
  int i, ok = 1;
  verbose = getenv("EMC_FUZZ_VERBOSE") != NULL;
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  for (i = 1; i < argc && ok; i++) {
    struct stat sb;
    if (stat(argv[i], &sb) != 0) {
      fprintf(stderr, "replay: no such file or directory: %s\n", argv[i]);
      ok = 0;
    } else if (S_ISDIR(sb.st_mode)) {
      ok = run_dir(argv[i], &runs);
    } else if (run_file(argv[i])) {
      runs++;
    } else {
      ok = 0;
    }
  }
  if (!ok) return 2;
  if (runs == 0) {
    fprintf(stderr, "replay: no inputs\n");
    return 2;
  }
  printf("replay: %zu inputs ran clean\n", runs);
  return 0;
}
