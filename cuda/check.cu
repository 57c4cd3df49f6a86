/*
 * check.cu: the check stage: emc__cuda_check, a white-box walk of every device structure
 * (tests), and the EMC_CUDA_PROFILE per-stage timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_cuda.h"

#define CHK(cond, ...)                                  \
  do {                                                  \
    if (!(cond)) {                                      \
      st = EMC_FAIL(EMC_ECORRUPT, __VA_ARGS__);         \
      goto done;                                        \
    }                                                   \
  } while (0)

/* Copy the device structures to the host (after every writer call has finished) and verify
 * them as emc__cache_check does the host backend's: every live entry found by a probe where it
 * is, its key the global key of its (table, id), never BUSY; pool entries name a used slot of a
 * page of their table, each slot once; unified entries point at their id's store row; page
 * live counts agree with the entries and the free bitmaps; the free page stack holds exactly
 * the free pages; each table's list of pages with free slots holds its own pages; bytes, rows,
 * dirty rows, live entries and tombstones agree with the counters; use stays at or below t1. */
extern "C" uint32_t emc__cuda_captured_slots(emc_cache *c) {
  emc__cuda_cache *k = c->cuda;
  uint32_t n;
  if (emc__cuda_enter(k) != EMC_OK) return UINT32_MAX;
  n = emc__cuda_reap_captured(k);
  emc__cuda_leave(k);
  return n;
}

/* Wait for every writer call: the writer stream's, and the sections of the last graph launched
 * (they run on the caller's stream). */
static cudaError_t wait_writer_calls(emc__cuda_cache *k) {
  cudaError_t e = cudaStreamSynchronize(k->writer);
  if (e == cudaSuccess && k->n_cap_sections) e = cudaEventSynchronize(k->cap_tail);
  return e;
}

extern "C" emc_status emc__cuda_check(emc_cache *c) {
  emc__cuda_cache *k = c->cuda;
  const dview &V = k->V;
  uint32_t nt = k->n_tables, t, p;
  uint64_t slots = V.ix.n_buckets * EMC__BUCKET, i, handles = (uint64_t)V.n_pages * V.max_slots;
  uint64_t empty = emc__key_empty(V.key_bits), tomb = emc__key_tomb(V.key_bits);
  uint64_t bytes = 0, dirty = 0, live = 0, tombs = 0, host_entries = 0, pinned = 0, pinned_bytes = 0;
  uint64_t *ring = NULL;
  uint32_t *ring_n = NULL;
  uint8_t *want = NULL;
  size_t kb = V.key_bits == 32 ? 4 : 8;
  unsigned char *arena = NULL, *keys = NULL;
  uint64_t *lm = NULL, *rows = NULL, *used = NULL;
  uint32_t *free_pages = NULL, *plist = NULL, *page_live = NULL;
  uint8_t *seen = NULL;
  tstate *ts = NULL;
  dglob g;
  emc__index_view ix;
  emc_status st = EMC_OK;
  cudaError_t e;
  if (!k) return EMC_FAIL(EMC_EUNSUPPORTED, "not a CUDA cache");
  EMC_TRY(emc__cuda_enter(k));
  e = wait_writer_calls(k);
  arena = (unsigned char *)malloc(k->arena_bytes);
  keys = (unsigned char *)malloc(slots * kb);
  lm = (uint64_t *)malloc(slots * 8);
  free_pages = (uint32_t *)malloc((size_t)V.n_pages * 4);
  plist = (uint32_t *)malloc((size_t)V.n_pages * 4);
  page_live = (uint32_t *)calloc(V.n_pages, 4);
  seen = (uint8_t *)calloc(V.n_pages, 1);
  used = (uint64_t *)calloc(handles / 64 + 1, 8);
  ts = (tstate *)malloc(nt * sizeof *ts);
  rows = (uint64_t *)calloc(nt, 8);
  ring = (uint64_t *)malloc((size_t)V.n_lists * V.ring_cap * 8 + 8);
  ring_n = (uint32_t *)malloc((size_t)V.n_lists * 4);
  want = (uint8_t *)calloc(slots, 1);
  if (!arena || !keys || !lm || !free_pages || !plist || !page_live || !seen || !used || !ts || !rows ||
      !ring || !ring_n || !want) {
    st = EMC_FAIL(EMC_ENOMEM, "check scratch");
    goto done;
  }
  if (e == cudaSuccess) e = cudaMemcpy(arena, V.arena, k->arena_bytes, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(keys, V.ix.keys, slots * kb, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(lm, V.ix.lm, slots * 8, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(free_pages, V.free_pages, (size_t)V.n_pages * 4, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(plist, V.plist, (size_t)V.n_pages * 4, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(ts, V.ts, nt * sizeof *ts, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(&g, V.g, sizeof g, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(ring_n, V.ring_n, (size_t)V.n_lists * 4, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess && V.ring_cap)
    e = cudaMemcpy(ring, V.ring_keys, (size_t)V.n_lists * V.ring_cap * 8, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    st = emc__cuda_fail(e, "copying the cache to the host");
    goto done;
  }
  ix.keys = keys;
  ix.lm = lm;
  ix.stamps = NULL;
  ix.epoch = NULL;
  ix.n_buckets = V.ix.n_buckets;
  ix.key_bits = V.key_bits;
  CHK(!(g.repack_epoch & 1u), "writer state left behind: re-pack epoch %u", g.repack_epoch);
  /* a section whose k_wr_end failed to enqueue stays open until the next section closes it
   * (emc__cuda_section_end): the host knows; the rest is checked as that close will leave it */
  CHK(g.writer_in == 0 || k->unclosed, "a writer section left open");
  CHK(!g.pf_open || k->unclosed, "a prefetch's ring list left open");
  if (g.pf_open) { /* the list k_wr_end will close */
    ring_n[g.pin_next] = (uint32_t)g.pf_new_n;
    g.pf_open = 0;
  }
  if (k->unclosed)
    for (t = 0; t < nt; t++) {
      ts[t].store_count += ts[t].new_rank;
      ts[t].new_rank = 0;
      ts[t].fresh = 0;
      ts[t].need = 0;
      ts[t].allow = 0;
    }
  CHK(g.overlaps == 0, "%llu writer sections began while another was open (an ordering defect)",
      (unsigned long long)g.overlaps);
  /* index entries */
  for (i = 0; i < slots; i++) {
    uint64_t key = emc__ix_key(&ix, i), l = lm[i], id;
    uint32_t loc;
    int64_t tt;
    if (key == empty) continue;
    if (key == tomb) {
      tombs++;
      continue;
    }
    live++;
    loc = emc__lm_loc(l);
    CHK(!(l & EMC__LM_BUSY), "index slot %llu: BUSY between calls", (unsigned long long)i);
    CHK(emc__index_find(&ix, key) == (int64_t)i, "index slot %llu: key found elsewhere", (unsigned long long)i);
    tt = emc__codec_table_of(&c->codec, key);
    CHK(tt >= 0, "index slot %llu: key %llx under no table's code", (unsigned long long)i, (unsigned long long)key);
    t = (uint32_t)tt;
    if (loc & EMC__LOC_HOST) {
      const emc__table *tb = &c->store->tables[t];
      uint64_t r = loc & EMC__LOC_MAX;
      host_entries++;
      /* (a shared store's count is the segment's: other processes add ids) */
      uint64_t held = k->shared ? EMC_LD_ACQUIRE(tb->count) : ts[t].store_count;
      CHK(tb->kind == EMC_TABLE_HASHED && r < held && !(l & EMC__LM_DIRTY) &&
              !(l & EMC__LM_PINS) &&
              key == emc__global_key(&c->codec.tables[t], tb->row_ids[r], c->codec.hash_seed),
          "unified entry of table %u at slot %llu points at a wrong row", t, (unsigned long long)i);
      continue;
    }
    {
      const emc__page_layout *L = &k->tabs_host[t].L;
      uint32_t pg = loc / V.max_slots, s = loc % V.max_slots;
      unsigned char *page = arena + (uint64_t)pg * V.page_bytes;
      CHK(pg < V.n_pages && s < L->n_slots, "table %u entry at slot %llu: handle %u out of range", t,
          (unsigned long long)i, loc);
      CHK(((emc__page_hdr *)page)->table == t, "table %u entry at slot %llu: page %u is table %u's", t,
          (unsigned long long)i, pg, ((emc__page_hdr *)page)->table);
      CHK(!(emc__page_bitmap(page, L)[s / 64] >> (s % 64) & 1u), "table %u entry at slot %llu: slot free",
          t, (unsigned long long)i);
      CHK(!(used[loc / 64] >> (loc % 64) & 1u), "slot handle %u named twice", loc);
      used[loc / 64] |= 1ull << (loc % 64);
      id = L->off_owner ? *emc__slot_owner(page, L, s) : emc__codec_dense_id(&c->codec, t, key);
      CHK(key == emc__global_key(&c->codec.tables[t], id, c->codec.hash_seed),
          "index slot %llu: key is not the global key of (%u, %llu)", (unsigned long long)i, t,
          (unsigned long long)id);
      page_live[pg]++;
      bytes += L->stride;
      dirty += (l & EMC__LM_DIRTY) != 0;
      rows[t]++;
      if (l & EMC__LM_PINS) {
        pinned++;
        pinned_bytes += L->stride;
      }
    }
  }
  CHK(live == g.ix_live && tombs == g.ix_tomb, "index: %llu live / %llu tombs, counters %llu / %llu",
      (unsigned long long)live, (unsigned long long)tombs, (unsigned long long)g.ix_live,
      (unsigned long long)g.ix_tomb);
  CHK(host_entries == g.host_entries && host_entries <= V.unified_max, "unified entries %llu, counter %llu",
      (unsigned long long)host_entries, (unsigned long long)g.host_entries);
  /* pages */
  CHK(g.free_top <= V.n_pages, "free_top %u > %u pages", g.free_top, V.n_pages);
  for (i = 0; i < g.free_top; i++) {
    p = free_pages[i];
    CHK(p < V.n_pages && !seen[p], "free page stack entry %llu: page %u bad or twice", (unsigned long long)i, p);
    seen[p] = 1;
    CHK(((emc__page_hdr *)(arena + (uint64_t)p * V.page_bytes))->table == EMC__PAGE_NONE,
        "page %u is on the free stack but held", p);
  }
  {
    uint64_t held = 0;
    for (p = 0; p < V.n_pages; p++) {
      emc__page_hdr *h = (emc__page_hdr *)(arena + (uint64_t)p * V.page_bytes);
      const emc__page_layout *L;
      uint32_t w, nfree = 0;
      if (h->table == EMC__PAGE_NONE) {
        CHK(seen[p], "free page %u is not on the free stack", p);
        continue;
      }
      held++;
      CHK(h->table < nt, "page %u: table %u", p, h->table);
      L = &k->tabs_host[h->table].L;
      for (w = 0; w < L->n_words; w++) nfree += emc__popc64(emc__page_bitmap(h, L)[w]);
      CHK(h->n_slots == L->n_slots && h->live == page_live[p] && h->live + nfree == L->n_slots,
          "page %u: %u entries name it, header %u live, bitmap %u free of %u", p, page_live[p], h->live,
          nfree, L->n_slots);
    }
    CHK(held == g.pages_held && held + g.free_top == V.n_pages, "pages: %llu held (counter %llu) + %u free != %u",
        (unsigned long long)held, (unsigned long long)g.pages_held, g.free_top, V.n_pages);
  }
  for (t = 0; t < nt; t++) {
    uint32_t j;
    CHK(rows[t] == ts[t].rows_cached, "table %u: %llu rows, counter %llu", t, (unsigned long long)rows[t],
        (unsigned long long)ts[t].rows_cached);
    CHK(ts[t].need == 0 && ts[t].allow == 0, "table %u: need %u / allow %u left over", t, ts[t].need, ts[t].allow);
    CHK(ts[t].pl_start <= ts[t].pl_end && ts[t].pl_end <= V.n_pages &&
            ts[t].pl_cursor <= ts[t].pl_end - ts[t].pl_start,
        "table %u: page list [%u, %u) cursor %u", t, ts[t].pl_start, ts[t].pl_end, ts[t].pl_cursor);
    for (j = ts[t].pl_start + ts[t].pl_cursor; j < ts[t].pl_end; j++) {
      uint32_t q = plist[j];
      emc__page_hdr *h = (emc__page_hdr *)(arena + (uint64_t)q * V.page_bytes);
      /* a listed page may have filled up or gone back to the stack since the pass (then
       * skipped by the planner), but never belong to another table */
      CHK(q < V.n_pages && (h->table == t || h->table == EMC__PAGE_NONE),
          "table %u: listed page %u belongs to table %u", t, q, h->table);
    }
    if (ts[t].cur_page != EMC_NONE32) {
      emc__page_hdr *h = (emc__page_hdr *)(arena + (uint64_t)ts[t].cur_page * V.page_bytes);
      CHK(ts[t].cur_page < V.n_pages && h->table == t, "table %u: current page %u is table %u's", t,
          ts[t].cur_page, h->table);
    }
  }
  CHK(bytes == g.bytes_in_use, "bytes in use %llu, slots add up to %llu", (unsigned long long)g.bytes_in_use,
      (unsigned long long)bytes);
  CHK(bytes <= V.high, "bytes in use %llu above t1 (%llu)", (unsigned long long)bytes, (unsigned long long)V.high);
  CHK(dirty == g.dirty_rows, "dirty rows %llu, counter %llu", (unsigned long long)dirty,
      (unsigned long long)g.dirty_rows);
  /* pins: an entry's count is the number of live lists naming it; the gauges add up */
  CHK(pinned == g.pinned_rows && pinned_bytes == g.pinned_bytes && pinned_bytes <= V.low,
      "pinned: %llu rows / %llu bytes, counters %llu / %llu, budget %llu", (unsigned long long)pinned,
      (unsigned long long)pinned_bytes, (unsigned long long)g.pinned_rows,
      (unsigned long long)g.pinned_bytes, (unsigned long long)V.low);
  for (t = 0; t < V.n_lists; t++) {
    CHK(ring_n[t] <= V.ring_cap, "pin list %u: %u keys, room for %u", t, ring_n[t], V.ring_cap);
    for (i = 0; i < ring_n[t]; i++) {
      int64_t q = emc__index_find(&ix, ring[(uint64_t)t * V.ring_cap + i]);
      CHK(q >= 0 && !(emc__lm_loc(lm[q]) & EMC__LOC_HOST), "pin list %u names key %llx, not cached", t,
          (unsigned long long)ring[(uint64_t)t * V.ring_cap + i]);
      want[q]++;
    }
  }
  for (i = 0; i < slots; i++) {
    uint64_t key = emc__ix_key(&ix, i);
    if (key == empty || key == tomb) continue;
    CHK(emc__lm_pins(lm[i]) == want[i], "index slot %llu: %u pins, %u live lists name it",
        (unsigned long long)i, emc__lm_pins(lm[i]), want[i]);
  }
  for (t = 0; t < nt; t++)
    CHK(ts[t].fresh == 0 && ts[t].new_rank == 0, "table %u: training counters left over", t);
  /* hashed tables: the device's claim bits are the store map's used slots, and every row the
   * store holds (the host's count, and the rows the device added since) is named by its id */
  for (t = 0; t < nt; t++) {
    const emc__table *tb = &c->store->tables[t];
    uint64_t nwords, used_slots = 0, r, cnt = ts[t].store_count;
    uint32_t *claim;
    /* (over a shared store the device adds no ids: its claim bits are not kept) */
    if (tb->kind != EMC_TABLE_HASHED || k->shared) continue;
    nwords = tb->map_cap / 32 + 1;
    claim = (uint32_t *)malloc(nwords * 4);
    if (!claim) {
      st = EMC_FAIL(EMC_ENOMEM, "check scratch for the claim bits of table %u", t);
      goto done;
    }
    e = cudaMemcpy(claim, k->map_claim[t], nwords * 4, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
      free(claim);
      st = emc__cuda_fail(e, "reading the claim bits");
      goto done;
    }
    for (i = 0; i < tb->map_cap && st == EMC_OK; i++) {
      int bit = (int)(claim[i / 32] >> (i % 32) & 1u), set = EMC_LD_ACQUIRE(&tb->map_rowp1[i]) != 0;
      used_slots += (uint64_t)set;
      if (bit != set)
        st = EMC_FAIL(EMC_ECORRUPT, "table %u: map slot %llu is %s but its claim bit is %d", t,
                      (unsigned long long)i, set ? "used" : "free", bit);
    }
    free(claim);
    if (st != EMC_OK) goto done;
    CHK(cnt >= EMC_LD_ACQUIRE(tb->count) && cnt <= tb->rows && used_slots == cnt,
        "table %u: the device counts %llu store rows, the host %llu, the map holds %llu (capacity %llu)", t,
        (unsigned long long)cnt, (unsigned long long)EMC_LD_RELAXED(tb->count), (unsigned long long)used_slots,
        (unsigned long long)tb->rows);
    for (r = 0; r < cnt; r++)
      CHK(emc__map_find(tb->map_ids, tb->map_rowp1, tb->map_cap, tb->row_ids[r]) == (int64_t)r,
          "table %u: store row %llu's id %llu does not map back to it", t, (unsigned long long)r,
          (unsigned long long)tb->row_ids[r]);
  }
done:
  emc__cuda_leave(k);
  free(arena);
  free(keys);
  free(lm);
  free(free_pages);
  free(plist);
  free(page_live);
  free(seen);
  free(used);
  free(ts);
  free(ring);
  free(ring_n);
  free(want);
  free(rows);
  return st;
}
#undef CHK

/* The index's shape (tests): slots, EMPTY and TOMB slots, and the longest cluster (a run of
 * buckets without an EMPTY slot plus the bucket that ends it; every bucket when none holds an
 * EMPTY slot), which bounds what a probe for an absent key walks. Waits for the device. */
extern "C" emc_status emc__cuda_index_shape(emc_cache *c, emc__ix_shape *out) {
  emc__cuda_cache *k = c ? c->cuda : NULL;
  uint64_t slots, nb, b, run = 0, first = UINT64_MAX, empty, tomb;
  size_t kb;
  unsigned char *keys;
  emc__index_view ix;
  cudaError_t e;
  emc_status st = EMC_OK;
  if (!k || !out) return EMC_FAIL(EMC_EINVAL, "emc__cuda_index_shape: not a CUDA cache, or out is NULL");
  memset(out, 0, sizeof *out);
  nb = k->V.ix.n_buckets;
  slots = nb * EMC__BUCKET;
  kb = k->V.key_bits == 32 ? 4 : 8;
  empty = emc__key_empty(k->V.key_bits);
  tomb = emc__key_tomb(k->V.key_bits);
  if (!(keys = (unsigned char *)malloc(slots * kb))) return EMC_FAIL(EMC_ENOMEM, "index shape scratch");
  if ((st = emc__cuda_enter(k)) != EMC_OK) {
    free(keys);
    return st;
  }
  e = wait_writer_calls(k);
  if (e == cudaSuccess) e = cudaMemcpy(keys, k->V.ix.keys, slots * kb, cudaMemcpyDeviceToHost);
  emc__cuda_leave(k);
  if (e != cudaSuccess) {
    free(keys);
    return emc__cuda_fail(e, "copying the index to the host");
  }
  memset(&ix, 0, sizeof ix);
  ix.keys = keys;
  ix.n_buckets = nb;
  ix.key_bits = k->V.key_bits;
  out->slots = slots;
  for (b = 0; b < nb; b++) {
    unsigned s, has_empty = 0;
    for (s = 0; s < EMC__BUCKET; s++) {
      uint64_t key = emc__ix_key(&ix, b * EMC__BUCKET + s);
      has_empty |= key == empty;
      out->empty += key == empty;
      out->tombs += key == tomb;
    }
    run++;
    if (has_empty) { /* a cluster ends here; the one that wraps round is counted at the end */
      if (first == UINT64_MAX) first = run;
      else if (run > out->longest_cluster) out->longest_cluster = run;
      run = 0;
    }
  }
  if (first == UINT64_MAX) out->longest_cluster = nb; /* no EMPTY slot anywhere */
  else if (run + first > out->longest_cluster) out->longest_cluster = run + first;
  free(keys);
  return st;
}

/* ================================================================= profile */
static const char *const stage_name[PROF_N] = {"lookup", "writer(admit+evict+maint)"};

void emc__cuda_prof_mark(emc__cuda_cache *k, int stage, int end, cudaStream_t st) {
  int i = 2 * stage + end;
  if (!k->prof) return;
  if (!k->pev[i]) cudaEventCreate(&k->pev[i]);
  cudaEventRecord(k->pev[i], st);
}

void emc__cuda_prof_collect(emc__cuda_cache *k) {
  int s;
  for (s = 0; s < PROF_N; s++) {
    float ms = 0;
    if (!k->pev[2 * s] || !k->pev[2 * s + 1]) continue;
    if (cudaEventSynchronize(k->pev[2 * s + 1]) == cudaSuccess &&
        cudaEventElapsedTime(&ms, k->pev[2 * s], k->pev[2 * s + 1]) == cudaSuccess)
      k->pacc[s] += ms;
  }
  (void)cudaGetLastError();
  k->pcalls++;
}

void emc__cuda_prof_print(emc__cuda_cache *k) {
  int s;
  if (!k->pcalls) return;
  fprintf(stderr, "emc profile: %llu lookups; device us/call:", (unsigned long long)k->pcalls);
  for (s = 0; s < PROF_N; s++)
    if (k->pev[2 * s]) fprintf(stderr, " %s %.1f", stage_name[s], 1000.0 * k->pacc[s] / (double)k->pcalls);
  fprintf(stderr, "\n");
}
