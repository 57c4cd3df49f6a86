/*
 * lib/item/pages.h: pool pages: layout, slot handles, free bitmaps.
 * Part of emc_item.h, which includes the parts in order and defines EMC_HD: include
 * emc_item.h, never this file alone (the file comment of emc_item.h gives the rules).
 */
#ifndef EMC_ITEM_PAGES_H
#define EMC_ITEM_PAGES_H

/* ------------------------------------------------------------------- pool pages
 * The pool is one arena of equal pages. A page belongs to one table at a time and is cut
 * into slots of that table's stride; the layout of a page of table t is fixed by t:
 *   [0, 64)     page header (emc__page_hdr)
 *   free bitmap n_words uint64: bit s set = slot s free (writer-only)
 *   owner[n]    uint64 id held by each slot, hashed tables only
 *   rows        n * stride bytes, 64-byte aligned
 * A slot is named by its handle, page * max_slots + slot (max_slots: the densest layout), which
 * must stay below 2^31. Slots carry no version, stamp, flags or free-list link: the index
 * entry holds the version, the dirty bit and the LRU stamp, the bitmap the free state. */
#define EMC__PAGE_NONE 0xffffffffu

typedef struct emc__page_hdr {
  uint32_t table;     /* owning table, EMC__PAGE_NONE when free */
  uint32_t n_slots;   /* slots of the owner's layout */
  uint32_t live;      /* slots in use */
  uint32_t prev;      /* host: neighbours in the owner's list of pages with free slots */
  uint32_t next;      /* ... or in the arena's list of free pages */
  uint32_t in_partial;/* host: 1 if in the owner's partial list */
  uint32_t gen;       /* incremented each time the page changes hands */
  uint32_t pad_[9];
} emc__page_hdr;

typedef struct emc__page_layout {
  uint32_t n_slots;   /* slots per page */
  uint32_t n_words;   /* free bitmap words */
  uint32_t off_bitmap, off_owner, off_rows; /* off_owner 0: no owner array (dense table) */
  uint32_t stride;    /* bytes per slot row */
} emc__page_layout;

/* Layout of a page of page_bytes for rows of `stride` bytes (owners: keep an id per slot);
 * n_slots 0 if none fits. */
EMC_HD emc__page_layout emc__layout_for(uint64_t page_bytes, uint64_t stride, int owners) {
  emc__page_layout L;
  uint64_t per = stride + (owners ? 8u : 0u), n = page_bytes > 256 ? (page_bytes - 192) * 8 / (per * 8 + 1) : 0;
  for (;; n--) {
    uint64_t words = (n + 63) / 64, o_bm = 64, o_own = o_bm + 8 * words,
             o_rows = ((owners ? o_own + 8 * n : o_own) + 63) & ~63ull;
    if (o_rows + n * stride <= page_bytes || n == 0) {
      L.n_slots = (uint32_t)n;
      L.n_words = (uint32_t)words;
      L.off_bitmap = (uint32_t)o_bm;
      L.off_owner = owners ? (uint32_t)o_own : 0u;
      L.off_rows = (uint32_t)o_rows;
      L.stride = (uint32_t)stride;
      return L;
    }
  }
}

EMC_HD uint64_t *emc__page_bitmap(void *page, const emc__page_layout *L) {
  return (uint64_t *)((unsigned char *)page + L->off_bitmap);
}
EMC_HD uint64_t *emc__slot_owner(void *page, const emc__page_layout *L, uint32_t s) {
  return (uint64_t *)((unsigned char *)page + L->off_owner) + s;
}
EMC_HD unsigned char *emc__slot_row(void *page, const emc__page_layout *L, uint32_t s) {
  return (unsigned char *)page + L->off_rows + (uint64_t)s * L->stride;
}
EMC_HD uint32_t emc__popc64(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return (uint32_t)__popcll(x);
#else
  return (uint32_t)__builtin_popcountll(x);
#endif
}
/* Index of the k-th (0-based) set bit of words[0 .. n_words), or -1 when fewer are set.
 * The device picks free slots with a warp-wide version of this; tests hold them equal. */
EMC_HD int64_t emc__bitmap_nth(const uint64_t *words, uint32_t n_words, uint32_t k) {
  uint32_t w;
  for (w = 0; w < n_words; w++) {
    uint64_t x = EMC_LD_RELAXED(&words[w]);
    uint32_t c = emc__popc64(x);
    if (k < c) {
      unsigned b = 0;
      for (;;) {
        if (x >> b & 1u) {
          if (k == 0) return (int64_t)w * 64 + b;
          k--;
        }
        b++;
      }
    }
    k -= c;
  }
  return -1;
}
/* A fresh page's bitmap: slots 0 .. n_slots-1 free, the bits past them clear. */
EMC_HD void emc__bitmap_fill(uint64_t *words, uint32_t n_words, uint32_t n_slots) {
  uint32_t w;
  for (w = 0; w < n_words; w++) {
    uint32_t lo = w * 64;
    uint64_t v = n_slots >= lo + 64 ? ~0ull : (n_slots > lo ? (1ull << (n_slots - lo)) - 1u : 0ull);
    EMC_ST_RELAXED(&words[w], v);
  }
}

#endif /* EMC_ITEM_PAGES_H */
