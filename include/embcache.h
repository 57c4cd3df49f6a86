/*
 * embcache: a GPU-oriented cache of embedding rows for recommendation models.
 *
 * The public contract. One header, one prefix (emc_). Every fallible call returns an
 * emc_status (0 = EMC_OK). A call that fails leaves its outputs and the state of its
 * objects untouched unless its comment says otherwise, and records a human-readable
 * detail retrievable with emc_last_error_detail() on the calling thread.
 * The "Errors:" list at each declaration names every status other than EMC_OK the call can
 * return (the test suite checks every status it observes against these lists). A call that
 * runs out of host memory returns EMC_ENOMEM, whatever it was doing.
 *
 * Objects
 *   emc_store  all embedding rows of all tables, in host memory (the source of truth).
 *   emc_cache  a global cache table over one store: one index keyed by Huffman-coded
 *              global keys, per-table pools of row slots inside one byte budget,
 *              version-numbered approximate LRU eviction between two thresholds,
 *              optimistic (version-validated) reads, write-back of inserted rows.
 *
 * Batches
 *   A batch is grouped by table (TorchRec's KeyedJaggedTensor): `offsets` has
 *   n_tables + 1 entries, offsets[0] == 0, non-decreasing, and ids[offsets[t] ..
 *   offsets[t+1]) belong to table t. Empty segments and duplicate ids are allowed.
 *   Row buffers hold the rows in the same order, packed: table t's segment starts at byte
 *   sum_{u<t} (offsets[u+1]-offsets[u]) * dim(u) * dtype_size(u), and each row occupies
 *   exactly dim * dtype_size bytes (no padding). emc_batch_bytes() computes the total.
 *
 * Threads
 *   emc_store: emc_store_read may run concurrently with anything. Writers (write,
 *   fill_uniform) are serialized internally. While a cache is attached to a private store,
 *   the store may only be changed through that cache (write/fill return EMC_EUNSUPPORTED);
 *   a shared store takes writes from anywhere (see "shared stores").
 *   emc_cache: emc_lookup, emc_lookup_ex, emc_insert, emc_flush and emc_get_stats may be
 *   called concurrently from any number of threads. Host backend: lookups never block on a
 *   lock (but over a shared store, see there: a lookup that finds rows written since the
 *   cache last looked takes the cache's writer lock to drop its copies): they read optimistically and validate each row against its index entry's version;
 *   with EMC_ADMISSION_BACKGROUND (what the default, EMC_ADMISSION_AUTO, picks where the
 *   process may run on 2 or more CPUs) the cache's admission thread admits their misses after
 *   they return; with EMC_ADMISSION_INLINE admission of their misses is skipped when another
 *   thread holds the cache's writer lock (see emc_cache_config.admission).
 *
 * CUDA backend (EMC_BACKEND_CUDA, or AUTO where a device answers)
 *   Memory spaces: ids, out, where and rows may be device memory of the cache's device
 *   (cudaMalloc, managed) or pinned host memory (cudaHostAlloc, cudaHostRegister: the device
 *   reads and writes it where it is), which is the fast path, or ordinary (pageable) host
 *   memory, which is staged through device buffers and makes the call wait for its stream.
 *   Memory of another device is refused (EMC_EINVAL), with or without peer access; every
 *   call leaves the caller's current device as it found it (a thread that never selected
 *   one has device 0 current: restoring it makes device 0's primary context if it had none,
 *   so select your device in every thread that calls a cache of another device). The few
 *   most recent device pointers are remembered by address: free a buffer of this device and
 *   get the same address from cudaMalloc on another, and the cache would take it for its own.
 *   Device and pinned buffers must be aligned to their elements (EMC_EINVAL otherwise, since
 *   a device faults on a misaligned load and the fault ends the context): ids, unique_ids and
 *   unique_offsets 8 bytes, grads and inverse 4 bytes, out and rows 2 bytes; pageable host
 *   buffers are staged and may lie anywhere. Pinned host buffers are read and written by the
 *   kernels where they are, like device buffers: a call whose buffers are all device or
 *   pinned memory returns without waiting and reports what the device finds wrong (ids out
 *   of range, no room) at the next emc_flush. offsets should be a host array, pinned or not
 *   (n_tables + 1 small integers, read where they are): device offsets cost one small copy
 *   to the host and a wait on the stream (refused while the stream is being captured). What
 *   memory a pointer is, is asked of CUDA at every call, except for device memory,
 *   remembered for the few most recent pointers.
 *   Streams: a lookup is one kernel on `stream` (a cudaStream_t; NULL = the default stream)
 *   plus an event record, and returns without waiting for the device unless a host buffer has
 *   to be filled: lookups from any number of streams and threads run on the device at once.
 *   Read `out` after synchronizing `stream`. A cache keeps up to 16 calls in flight (each
 *   with its scratch); a call made while 16 are still running on the device first waits, on
 *   the host, for the oldest one (counted in stats.host_syncs, with every other wait the
 *   library makes). Every change to the cache (admitting a lookup's misses, eviction,
 *   emc_insert, emc_flush, the training calls' updates) is a writer call; writer calls run
 *   one after another on the cache's own writer stream, beside the lookups, ordered by stream
 *   order and events (no kernel ever waits for another kernel, stream or the host); a
 *   lookup's misses are admitted there after it, asynchronously, so the next lookup of the
 *   same rows may still miss. Readers validate every row they copy (lib/emc_item.h): a
 *   lookup never returns a torn row or another key's row.
 *   Graphs: lookups and the training calls can be captured into a CUDA graph (with device or
 *   pinned buffers; pageable ones are refused with EMC_EINVAL under capture). The writer
 *   calls of a capture are captured with it, each after the previous one of the same cache
 *   in the same capture; the graph, when launched, first waits for the writer calls enqueued
 *   (and the graphs launched) before its launch, and writer calls enqueued after its launch
 *   wait for its own. That order is taken when a call is enqueued or a graph launched: launch
 *   a graph holding calls of a cache while no other thread is inside a call of that cache or
 *   launching such a graph. Writer calls found running at once anyway are counted on the
 *   device and make the next emc_flush return EMC_ECUDA. Each captured call keeps a scratch
 *   buffer of its own, freed by the cache's next call once every graph holding it (the
 *   captured graph and each one instantiated from it) is destroyed and done; destroy those
 *   graphs before the cache. So two graphs instantiated from one capture share that buffer:
 *   never run them at once. At most 8 captures holding calls of one cache may be under way
 *   at the same time. A call on a stream whose capture was invalidated returns EMC_ECUDA.
 *   Failures after enqueueing: a call that gets EMC_ECUDA from a CUDA call (a launch the
 *   runtime refuses, ...) after part of its work was enqueued leaves that part to run: the
 *   cache stays consistent and loses no row, host `out` and `where` are not written, but an
 *   insert or a training call may be partly applied (do not simply repeat a training step).
 *   Under capture such a failure invalidates the capture, so no graph holds half a call.
 *   Store rows: the store's row memory is registered and mapped: the device reads missing
 *   rows from host memory directly and writes dirty rows back there. emc_store_read of an
 *   attached store sees written-back rows once emc_flush (which waits) has returned.
 *   Dense ids out of range: with pageable host ids, EMC_ERANGE before anything changes (as on
 *   the host backend); with device (or pinned) ids the check runs on the device: the
 *   position reads a zero row (where: EMC_WHERE_ABSENT) and the next emc_flush returns
 *   EMC_ERANGE naming it.
 *   Training calls and emc_insert (see "training") make no host round trip with device
 *   buffers: the batch is sorted by id on the device (on `stream`), every check (dense ids,
 *   hashed capacity, the batch against the cache) runs on the device, and the cache's part
 *   runs as a writer call that `stream` then waits for (on the device). A call the device
 *   refuses changes nothing; the next emc_flush returns its status and names it. New hashed
 *   ids get their store rows on the device, from the table's free rows: emc_store_table_count
 *   counts them once emc_flush has returned. With pageable host buffers these calls stage
 *   them, wait, and return the device's verdict themselves.
 */
#ifndef EMBCACHE_H
#define EMBCACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define EMC_API __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define EMC_API __attribute__((visibility("default")))
#else
#define EMC_API
#endif

/* ---------------------------------------------------------------- version */
#define EMC_VERSION_MAJOR 0
#define EMC_VERSION_MINOR 3
#define EMC_VERSION_PATCH 0
#define EMC_VERSION_NUMBER (EMC_VERSION_MAJOR * 10000 + EMC_VERSION_MINOR * 100 + EMC_VERSION_PATCH)
#define EMC_VERSION_STRING "0.3.0"

/* Runtime version of the linked library, EMC_VERSION_NUMBER's encoding. */
EMC_API unsigned emc_version(void);
/* Runtime version string of the linked library ("0.1.0"); static storage. */
EMC_API const char *emc_version_string(void);

/* Which allocator serves the library's big host allocations (store rows, hashed-table maps,
 * the host backend's pools and index), as static text that starts with "jemalloc" or
 * "system" and says why. jemalloc (its mallocx API on private arenas) is used when the
 * process has libjemalloc.so.2 loaded or can load it: programs linked through the CMake
 * package or pkg-config link it at start-up. A library loaded later with dlopen (Python's
 * ctypes) usually cannot load it (its initial-exec TLS needs room in the static TLS block
 * that only start-up provides) and uses "system": mmap with MADV_HUGEPAGE for blocks of
 * 1 MiB and more, posix_memalign below. Decided once per process, when the library is
 * loaded (so that no API call loads a library: an allocation failing inside the dynamic
 * loader can end the process); EMC_HOST_ALLOCATOR=system in the environment at that moment
 * forces "system". Never NULL. */
EMC_API const char *emc_host_allocator(void);

/* ----------------------------------------------------------------- status */
/* X-macro: name, value, text. The enum, emc_status_name and emc_strerror come from it. */
#define EMC_STATUS_MAP(X)                                                               \
  X(EMC_OK, 0, "success")                                                               \
  X(EMC_EINVAL, 1, "invalid argument")                                                  \
  X(EMC_ENOMEM, 2, "out of host memory")                                                \
  X(EMC_EDEVMEM, 3, "out of device memory")                                             \
  X(EMC_ENODEV, 4, "no CUDA device available")                                          \
  X(EMC_ECUDA, 5, "CUDA runtime error")                                                 \
  X(EMC_EKEYSPACE, 6, "tables do not fit the global key width")                         \
  X(EMC_ERANGE, 7, "id or table out of range")                                          \
  X(EMC_EIO, 8, "input/output error")                                                   \
  X(EMC_ECORRUPT, 9, "corrupt or foreign file")                                         \
  X(EMC_EUNSUPPORTED, 10, "operation not supported in this configuration")               \
  X(EMC_ECAPACITY, 11, "the batch's rows do not fit the cache (pin budget or capacity)") \
  X(EMC_ETIMEDOUT, 12, "a peer did not arrive in time")

typedef enum emc_status {
#define EMC__STATUS_ENUM(name, value, text) name = value,
  EMC_STATUS_MAP(EMC__STATUS_ENUM)
#undef EMC__STATUS_ENUM
} emc_status;

/* Static text describing s ("invalid argument"); "unknown status" for values outside the enum. */
EMC_API const char *emc_strerror(emc_status s);
/* Static name of s ("EMC_EINVAL"); "EMC_UNKNOWN" for values outside the enum. */
EMC_API const char *emc_status_name(emc_status s);
/* Thread-local text of this thread's last failure (which call, which argument, why).
 * Empty string if no call has failed on this thread. Valid until this thread's next
 * failing call. Never NULL. */
EMC_API const char *emc_last_error_detail(void);

/* ----------------------------------------------------------------- tables */
typedef enum emc_dtype {
  EMC_DTYPE_F32 = 0, /* IEEE binary32, 4 bytes per element */
  EMC_DTYPE_F16 = 1  /* IEEE binary16, 2 bytes per element (stored as raw bits) */
} emc_dtype;

typedef enum emc_table_kind {
  EMC_TABLE_DENSE = 0, /* ids in [0, rows); every row exists (zero until written) */
  EMC_TABLE_HASHED = 1 /* any 64-bit id; at most `rows` distinct ids; a row exists once written */
} emc_table_kind;

/* Optimizer state kept beside every row of a table, in the store, the cache and the store
 * file, moved with the row (admitted, written back, saved) but never returned by lookups. */
typedef enum emc_row_state {
  EMC_STATE_NONE = 0,   /* the row only (SGD needs nothing more) */
  EMC_STATE_ADAGRAD = 1 /* one f32 accumulator per row (row-wise Adagrad's sum of mean squared
                           gradients; 0 at create), read with emc_store_read_state */
} emc_row_state;

typedef struct emc_table_desc {
  const char *name;    /* table name, copied; NULL gives "t<index>"; at most 255 bytes */
  emc_table_kind kind; /* dense or hashed */
  uint64_t rows;       /* dense: row count; hashed: capacity in distinct ids. >= 1 */
  uint32_t dim;        /* elements per row, 1 .. EMC_MAX_DIM */
  emc_dtype dtype;     /* element type */
  emc_row_state state; /* optimizer state beside each row; default (0) EMC_STATE_NONE */
} emc_table_desc;

#define EMC_MAX_TABLES 4096u      /* tables per store */
#define EMC_MAX_DIM 65536u        /* elements per row */
#define EMC_MAX_ROWS (1ull << 40) /* rows per table */

/* Bytes of one packed row of a table: dim * (4 for f32, 2 for f16). */
EMC_API size_t emc_dtype_size(emc_dtype d);

/* ------------------------------------------------------------------ store */
typedef struct emc_store emc_store;

/* Create a store of n_tables tables in host memory, every dense row zero, every hashed
 * table empty. Each table's rows live in one 64-byte-aligned allocation (jemalloc, or mmap
 * where jemalloc cannot be used: see emc_host_allocator).
 *   tables: host array of n_tables descriptors (names are copied).
 *   out:    receives the store; untouched on failure.
 * Errors: EMC_EINVAL (NULL tables/out, n_tables 0 or > EMC_MAX_TABLES, rows 0 or >
 *         EMC_MAX_ROWS, dim 0 or > EMC_MAX_DIM, bad kind/dtype, name too long),
 *         EMC_ENOMEM. Blocking. */
EMC_API emc_status emc_store_create(const emc_table_desc *tables, uint32_t n_tables,
                                    emc_store **out);

/* Free a store. NULL is fine. The store must have no attached cache and no joined training
 * group (destroy, leave them first); destroying a store with either is refused and leaks
 * nothing but the call's effect: the store stays alive and the detail says why. */
EMC_API void emc_store_destroy(emc_store *s);

/* Number of tables; 0 for NULL. */
EMC_API uint32_t emc_store_n_tables(const emc_store *s);

/* Copy table `table`'s descriptor into *out. out->name points into the store (valid
 * while the store lives).  Errors: EMC_EINVAL (NULL), EMC_ERANGE (table >= n_tables). */
EMC_API emc_status emc_store_table(const emc_store *s, uint32_t table, emc_table_desc *out);

/* Distinct ids present in a hashed table, or the row count of a dense table.
 * Errors: EMC_EINVAL (NULL), EMC_ERANGE (table). */
EMC_API emc_status emc_store_table_count(const emc_store *s, uint32_t table, uint64_t *out);

/* The value emc_store_fill_uniform writes for (seed, table, id): dim elements, element j
 * uniformly distributed in [lo, hi), converted to the table's dtype (round to nearest
 * even for f16). Pure function: lets a checker recompute any row.
 *   out: host buffer of dim * emc_dtype_size(dtype) bytes.
 * Errors: EMC_EINVAL (NULL out, dim 0, bad dtype, !(lo <= hi), non-finite bounds). */
EMC_API emc_status emc_uniform_row(uint64_t seed, uint32_t table, uint64_t id, float lo,
                                   float hi, uint32_t dim, emc_dtype dtype, void *out);

/* Fill table `table` with emc_uniform_row(seed, table, id, lo, hi, ...) for every dense
 * id in [0, rows), or for every id already present in a hashed table.
 * Errors: EMC_EINVAL (NULL, bad bounds), EMC_ERANGE (table), EMC_EUNSUPPORTED (a cache
 * is attached to this private store), EMC_ENOMEM (a row buffer), EMC_ECORRUPT (a shared store
 * whose lock, or hashed count, was written over: nothing written). Blocking. */
EMC_API emc_status emc_store_fill_uniform(emc_store *s, uint32_t table, float lo, float hi,
                                          uint64_t seed);

/* Write n rows of one table. Dense: ids in [0, rows). Hashed: new ids take a free row;
 * duplicates in one call: the last one wins.
 *   ids:  host array of n ids.   rows: host buffer (n, dim) packed in the table's dtype.
 * The call is all-or-nothing: ids are checked (range, hashed capacity) before any row is
 * written. Errors: EMC_EINVAL (NULL with n > 0; n ids or rows whose byte size overflows),
 * EMC_ERANGE (table, dense id >= rows, hashed table would exceed its capacity),
 * EMC_EUNSUPPORTED (a cache is attached to this private store), EMC_ENOMEM (hashed: the
 * scratch set of new ids),
 * EMC_ECORRUPT (a shared store whose id map another process corrupted: the rows before the
 * bad id are written; or whose lock was written over: nothing written). n == 0 is a no-op.
 * Blocking. */
EMC_API emc_status emc_store_write(emc_store *s, uint32_t table, const uint64_t *ids,
                                   size_t n, const void *rows);

/* Read n rows of one table into rows (n, dim), packed in the table's dtype. A hashed id
 * that is absent reads as a zero row. With a cache attached to a private store the store
 * may hold older values than the cache (rows inserted and not yet written back): emc_flush
 * first. A shared store always holds its caches' writes.
 * Errors: EMC_EINVAL (NULL with n > 0; n ids or rows whose byte size overflows), EMC_ERANGE
 * (table, dense id >= rows). Blocking;
 * `rows` is untouched on failure. */
EMC_API emc_status emc_store_read(const emc_store *s, uint32_t table, const uint64_t *ids,
                                  size_t n, void *rows);

/* Save the store to `path` in the embcache store format (see README, "Store file format").
 * The file is written and fsynced under no name (O_TMPFILE) in path's directory, or, where
 * the filesystem lacks O_TMPFILE, as "<path>.tmp-<pid>-<hex>"; then it is renamed over path
 * and the directory is fsynced. So path always holds one complete store (the old one or this
 * one), whatever the interleaving with other saves to path from any thread or process, and a
 * save that fails or is killed leaves no file behind (except when killed between naming the
 * file and the rename, two system calls apart; every save removes such temporaries of path
 * left by processes that no longer exist). Sections carry XXH64 checksums. The file holds
 * the store's rows: rows an attached cache holds dirty (emc_insert, emc_apply_gradients) are
 * written to the store only by emc_flush, emc_cache_destroy or their eviction, so emc_flush
 * every cache of the store first (as before emc_store_read).
 * Errors: EMC_EINVAL (NULL s or path), EMC_ENOMEM (save buffers, the stream, the hash state;
 * a system call failing with ENOMEM), EMC_EIO (path names a device, FIFO or socket, or a
 * link to one, when the call starts: never replaced; the file cannot be created, written,
 * fsynced, linked or renamed: errno text in the detail; path keeps its previous content. One
 * EMC_EIO comes after the rename: the directory fsync failed, the new file is in place but may not
 * survive a crash), EMC_ECORRUPT (a shared store whose id map another process corrupted:
 * nothing is saved). Blocking. */
EMC_API emc_status emc_store_save(const emc_store *s, const char *path);

/* Open a store saved by emc_store_save. Every size and checksum is verified before the
 * store is returned; nothing half-loaded is ever returned.
 * Errors: EMC_EINVAL (NULL), EMC_EIO (cannot open/read), EMC_ECORRUPT (bad magic, version,
 * checksum, truncated, inconsistent sizes, non-zero reserved header bytes or name padding),
 * EMC_ENOMEM (hashed tables get their full
 * capacity, `rows` in the file, allocated as at create: a small file can ask for much
 * memory). *out is written only on success. Blocking. */
EMC_API emc_status emc_store_open(const char *path, emc_store **out);

/* ------------------------------------------------------------ shared stores
 * A store whose rows live in POSIX shared memory: one copy per machine, mapped by every
 * process that attaches it (each at its own address: the segment holds offsets, never
 * pointers). An attached store is an emc_store like any other for emc_store_read / _write /
 * _read_state / _fill_uniform / _save / _table / _table_count, from any number of threads and
 * processes at once: readers never lock and never see a torn row (per-row versions in the
 * segment); writers of all processes serialize on a robust lock in the segment. A writer
 * that dies mid-call leaves every row whole (the row it was writing keeps its old value; the
 * next writer or a waiting reader repairs it), but the rows it wrote before its death stay
 * written. A process's private memory for a shared store does not grow with its rows.
 * Caches: any number of host caches, in any processes (several in one process too), may
 * serve one shared store. Their writes (emc_insert, emc_apply_gradients) go through to the
 * shared rows before the call returns (rows are never dirty; emc_flush has nothing to do),
 * under the segment's lock, held for the whole call. The segment keeps an update log (the
 * keys each write changed, and a sequence number): every emc_lookup, emc_lookup_ex,
 * emc_insert, emc_apply_gradients and emc_prefetch of a cache first reads the sequence (one atomic load) and drops, or refreshes when pinned by emc_prefetch, its copies
 * of rows written since; a cache that fell further behind than the log holds (the store's
 * rows rounded up to a power of two, 1024 to 32768 entries) drops every row of the tables
 * written meanwhile. So a lookup in any process never returns a row older than a
 * write, by any process and any path (emc_store_write, _fill_uniform, a cache's write),
 * that completed before the lookup began. Rows dropped this way count in stats.evictions. A
 * cache's emc_insert, emc_apply_gradients and emc_prefetch hold the segment's lock for the
 * whole call, so every process's writers wait for them (a host cache's lookups do not; a CUDA
 * cache's lookup takes the lock, briefly, when the log moved, below).
 * CUDA caches over a shared store (EMC_BACKEND_CUDA, asked for by name: EMC_BACKEND_AUTO picks
 * the host backend for one) read the segment zero-copy and keep their copies by the same log,
 * refreshing each copy a write names in place (pins kept) rather than dropping it. The device
 * never waits for another process: a row a writer is rewriting while a lookup kernel copies it
 * is read again by the host, so emc_lookup over a shared store waits for its kernel (counted
 * in stats.host_syncs); emc_insert and emc_apply_gradients run on the host, into the shared
 * rows, with the host backend's arithmetic (bit for bit; the CUDA backend's batch limits do
 * not apply, emc_insert admits nothing, and a copy the cache holds is refreshed before the call
 * returns), after waiting for the stream; emc_prefetch runs on the device under the segment's
 * lock and waits for it. None of these calls may be captured in a CUDA graph
 * (EMC_EUNSUPPORTED: a graph replayed later would not look at the log).
 * The name is what shm_open takes: "/" then 1..254 bytes without "/" (e.g. "/embcache-m1").
 * emc_store_destroy unmaps the store from this process; the memory stays while the name
 * exists or another process has it mapped (emc_store_unlink removes the name). A process
 * that writes over the segment's lock itself can make the others' writes fail
 * (EMC_ECORRUPT) or wait, and one that writes row versions odd while a writer holds the lock
 * can make readers wait until the lock is free; nothing it scribbles makes a call leave the
 * segment (a corrupt id map or count: EMC_ECORRUPT). */

/* Create the shared store `name` (mode 0600: processes of the same user) with these tables,
 * rows zero, and map it. Errors: EMC_EINVAL (a bad name; as emc_store_create: NULL
 * tables/out, bad n_tables or descriptors), EMC_EIO (the name exists, or shm_open /
 * ftruncate / mmap fail: errno text in the detail), EMC_ENOMEM (no room for the segment in
 * /dev/shm: its pages are reserved at create, so a full /dev/shm fails here, never with a
 * SIGBUS later). Nothing is left behind on failure. Blocking. */
EMC_API emc_status emc_store_create_shared(const char *name, const emc_table_desc *tables,
                                           uint32_t n_tables, emc_store **out);
/* Map the shared store `name` that another process (or this one) created. Waits up to 2 s
 * for a creator that is still reserving its pages, laying it out or (emc_store_open_shared)
 * loading it: a creator slower than that (a store of tens of GiB) makes attach return
 * EMC_ECORRUPT "never finished" or "no header"; try again. A name whose creator died midway
 * stays so until emc_store_unlink removes it.
 * Errors: EMC_EINVAL (NULL, a bad name), EMC_EIO (no such name, or no permission: errno text),
 * EMC_ECORRUPT (not an embcache store, another format version, truncated, inconsistent
 * tables, or never finished by its creator), EMC_ENOMEM. Blocking. Attach checks the
 * segment's layout, not the contents of its hashed tables' id maps (that would read every
 * map): a map another process scribbled on never makes a read leave its table (a row past
 * the table reads as absent), and emc_store_save refuses it (EMC_ECORRUPT). */
EMC_API emc_status emc_store_attach(const char *name, emc_store **out);
/* Open a store file (emc_store_save's format) into the new shared store `name`: a restarted
 * server attaches to it instead of reading the file again. The file is read and verified
 * whole before the segment is created (it takes the file's size in private memory while
 * loading). Other processes can attach only once every row is loaded. Errors: EMC_EINVAL
 * (NULL, a bad name), EMC_EIO (the file cannot be read; the name exists), EMC_ECORRUPT (the
 * file fails emc_store_open's checks), EMC_ENOMEM; nothing is created on failure. Blocking. */
EMC_API emc_status emc_store_open_shared(const char *path, const char *name, emc_store **out);
/* Remove the name. Processes that have the store mapped keep it until they destroy it; the
 * memory goes with the last of them. Errors: EMC_EINVAL (bad name), EMC_EIO (no such name,
 * no permission: errno text). */
EMC_API emc_status emc_store_unlink(const char *name);

/* ------------------------------------------------------------------ cache */
typedef enum emc_backend {
  EMC_BACKEND_AUTO = 0, /* CUDA when a device answers and the CUDA backend is built; else host */
  EMC_BACKEND_HOST = 1, /* host memory, host pointers, `stream` ignored */
  EMC_BACKEND_CUDA = 2  /* device memory; see "CUDA backend" above */
} emc_backend;

typedef struct emc_cache_config {
  size_t struct_size;          /* sizeof(emc_cache_config); set by emc_cache_config_init */
  emc_backend backend;         /* default EMC_BACKEND_AUTO */
  int device;                  /* CUDA device ordinal; default 0; ignored by the host backend */
  size_t capacity_bytes;       /* budget for cached rows (all tables together); default 64 MiB */
  float evict_high;            /* t1: evict when rows in use would exceed t1 * capacity; default 0.95 */
  float evict_low;             /* t2: an eviction pass frees LRU rows until use <= t2 * capacity;
                                  default 0.80; 0 < t2 < t1 <= 1 */
  uint32_t key_bits;           /* global key width, 32 or 64; default 64 */
  uint64_t unified_index_rows; /* index entries that map hashed-table keys straight to host
                                  rows (the unified index), so a miss resolves without a store
                                  probe; default 65536; 0 disables */
  uint64_t hash_seed;          /* seed of XXH3 for hashed-table ids; default 0 */
  uint32_t prefetch_depth;     /* a row pinned by emc_prefetch stays pinned through the next
                                  prefetch_depth prefetch calls and is released by the one
                                  after; default 1; 0 .. 14 */
  uint32_t admission;          /* host backend: when a lookup's misses are admitted
                                  (emc_admission); default EMC_ADMISSION_AUTO. The CUDA
                                  backend always admits on its writer stream, after the
                                  lookup, and accepts every value. */
  uint64_t reserved_;          /* 0 (emc_cache_config_init). It makes the struct longer than the
                                  version before `admission`, whose tail padding lay where
                                  `admission` is now: a struct_size of that version gets the
                                  default admission whatever those bytes hold. */
} emc_cache_config;

/* When the host backend admits a lookup's misses (emc_cache_config.admission).
 *   EMC_ADMISSION_INLINE      inside the lookup, after its rows are served (the caller waits
 *                             for the store reads and any eviction pass); a row a lookup
 *                             missed is cached when the lookup returns (unless another
 *                             thread held the writer lock: admit_skipped).
 *   EMC_ADMISSION_BACKGROUND  the lookup serves its rows, records its misses and returns; a
 *                             thread of the cache admits them soon after, in order, with the
 *                             same checks (each row read from the store under the writer lock,
 *                             so it is current; a row cached meanwhile is left as it is). The
 *                             next lookup of a missed row may still miss (as on the CUDA
 *                             backend). Up to EMC_ADMISSION_QUEUE_ROWS misses (or as many
 *                             rows as the cache holds, if fewer, but 65536 at least) wait at
 *                             once; beyond that they are not admitted (admit_skipped).
 *                             emc_flush first waits until the misses of every lookup that
 *                             returned before it are admitted or skipped (not for lookups
 *                             running meanwhile), so stats read after it count them. The
 *                             thread is named "emc-admit". Needs a free core to pay off.
 *                             fork(): a child's copy of such a cache has no thread and admits
 *                             inline (emc_cache_admission says so); it works only if the fork
 *                             came while no call of the cache ran and no admission was queued
 *                             (say, right after an emc_flush with no lookup or insert running),
 *                             or the child may find the writer lock held or an entry busy
 *                             forever. Create caches after forking where you can. (_Fork and
 *                             raw clone skip the fork handler this relies on.)
 *   EMC_ADMISSION_AUTO        (the default) BACKGROUND where the thread that creates the
 *                             cache may run on 2 or more CPUs (its affinity mask; CPU quotas
 *                             of a cgroup are not looked at) and the admission thread starts,
 *                             else INLINE; emc_cache_admission() says which. Each cache has
 *                             its own thread (one cache per table: one thread per table). Choose INLINE by name
 *                             where a lookup's misses must be cached when it returns, or the
 *                             stats exact without an emc_flush, or for one core. */
typedef enum emc_admission {
  EMC_ADMISSION_INLINE = 0,
  EMC_ADMISSION_BACKGROUND = 1,
  EMC_ADMISSION_AUTO = 2
} emc_admission;
#define EMC_ADMISSION_QUEUE_ROWS 262144u

/* Fill *cfg with the defaults above and set struct_size. NULL is ignored. */
EMC_API void emc_cache_config_init(emc_cache_config *cfg);

typedef struct emc_cache emc_cache;

/* Number of CUDA devices the CUDA backend can use: what EMC_BACKEND_AUTO looks at (it picks
 * CUDA when cfg->device is below this count).
 *   out: receives the count (>= 1); untouched on failure.
 * Errors: EMC_EINVAL (NULL out), EMC_ENODEV (no device; the detail says why: "no NVIDIA
 * driver found (...)" where none is installed, else the CUDA runtime's error, or 0 devices),
 * EMC_EUNSUPPORTED (built without CUDA). Blocking (initialises the CUDA runtime). */
EMC_API emc_status emc_device_count(int *out);

/* Create a cache over `store` and attach it (a private store serves at most one cache; a
 * shared store any number of host caches, see "shared stores").
 *   cfg: NULL for defaults; otherwise cfg->struct_size must be sizeof(emc_cache_config)
 *        or a size of an earlier version of the struct (missing fields take defaults).
 * The global key codec is built here: a canonical Huffman code of the table ids weighted by
 * row count. Errors: EMC_EINVAL (NULL store/out, bad struct_size, thresholds outside
 * 0 < t2 < t1 <= 1, key_bits not 32/64, unified_index_rows > 2^32, admission not an
 * emc_admission, capacity too small for
 * one row of the widest table, or so large that the pool would need more than 2^31 - 1 pages
 * or 2^32 row slots: about 2^48 bytes for wide rows, less for narrow ones), EMC_EKEYSPACE (a table cannot fit key_bits: the detail names it and the bits it
 * lacks), EMC_EUNSUPPORTED (a private store that already has a cache; CUDA requested over
 * a shared store, or from a build without CUDA), EMC_ENODEV (CUDA requested and no device), EMC_EDEVMEM (capacity_bytes, with the
 * index, above the device's free memory), EMC_ECUDA (a CUDA call failed; its text in the
 * detail; nothing is leaked), EMC_ENOMEM (the cache's host structures; host backend: the
 * pool arena and the index, whose sizes follow capacity_bytes; the admission thread could
 * not start, with EMC_ADMISSION_BACKGROUND by name: AUTO admits inline instead). Blocking. */
EMC_API emc_status emc_cache_create(emc_store *store, const emc_cache_config *cfg,
                                    emc_cache **out);

/* Write every dirty (inserted, not yet written back) row back to the store, free the cache
 * and detach it from the store. NULL is fine (returns EMC_OK). On a failure to write back
 * the cache is still freed only if no data would be lost; otherwise the error is returned
 * and the cache stays usable. Host backend: never fails. Errors (CUDA backend): EMC_ECUDA,
 * EMC_EDEVMEM (a CUDA call of the final flush failed). Blocking. */
EMC_API emc_status emc_cache_destroy(emc_cache *c);

/* Backend actually in use (AUTO resolved). */
EMC_API emc_backend emc_cache_backend(const emc_cache *c);

/* Admission actually in use (EMC_ADMISSION_AUTO resolved): EMC_ADMISSION_INLINE or
 * EMC_ADMISSION_BACKGROUND; CUDA backend: EMC_ADMISSION_BACKGROUND (it admits on its writer
 * stream after the lookup, whatever the configuration); a child of fork(): INLINE. NULL:
 * EMC_ADMISSION_AUTO. */
EMC_API emc_admission emc_cache_admission(const emc_cache *c);

/* Bytes of a batch's packed row buffer for the cache's store (see "Batches").
 * offsets: host array of n_tables + 1 entries. Errors: EMC_EINVAL (NULL, bad offsets: not
 * starting at 0, decreasing, more ids than an address space holds, or a byte size that
 * overflows). */
EMC_API emc_status emc_batch_bytes(const emc_store *s, const uint64_t *offsets, size_t *out);

/* Where emc_lookup_ex found each row. */
typedef enum emc_where {
  EMC_WHERE_CACHE = 0, /* a cache slot (hit) */
  EMC_WHERE_STORE = 1, /* the store (miss) */
  EMC_WHERE_ABSENT = 2 /* hashed id absent from the store: zero row */
} emc_where;

/* Look a batch up: out receives every row (see "Batches"). Missing rows are read from the
 * store and admitted into the cache (evicting least-recently-used rows when use would
 * exceed t1): before the call returns, or after it (emc_cache_config.admission; the CUDA
 * backend: on its writer stream). Absent hashed ids give zero rows and are not admitted.
 * Every row returned is the row's value at one instant during the call, never torn.
 * Host backend: ids, offsets, out are host pointers; stream must be NULL (ignored).
 * CUDA backend: see "CUDA backend" above (device or host pointers, ordered on stream).
 *   ids:     (offsets[n_tables],)   offsets: (n_tables + 1,)   out: emc_batch_bytes bytes.
 * Errors: EMC_EINVAL (NULL, bad offsets as for emc_batch_bytes; CUDA backend: more than
 * 2^32 - 16 ids, device or pinned ids or out off their alignment), EMC_ERANGE (a dense id
 * >= rows; CUDA backend with device or pinned ids: reported by the next emc_flush),
 * EMC_ENOMEM (host scratch: about 24 bytes per id), EMC_ECUDA,
 * EMC_EDEVMEM (scratch buffers).
 * Checked before anything changes: on error out, stats and cache contents are untouched.
 * Blocking (host); CUDA: asynchronous on stream for device buffers. */
EMC_API emc_status emc_lookup(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                              void *out, void *stream);

/* emc_lookup that also reports, per position, where the row came from.
 *   where: NULL, or an array (offsets[n_tables],) of uint8_t receiving emc_where values
 *          (host memory; CUDA backend: host or device memory); untouched on failure.
 * Errors: as emc_lookup: EMC_EINVAL, EMC_ERANGE, EMC_ENOMEM, EMC_ECUDA, EMC_EDEVMEM. */
EMC_API emc_status emc_lookup_ex(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                 void *out, uint8_t *where, void *stream);

/* Insert (update) rows: each row becomes the value of its id in the cache, marked dirty, and
 * is written back to the store on eviction, emc_flush or emc_cache_destroy (over a shared
 * store: written through to the store before the call returns, and clean). Within one call
 * the last of duplicate ids wins. A row that cannot get a slot is written through to the
 * store. Hashed ids new to the store reserve a store row here.
 * Host backend: host pointers, stream NULL. rows: emc_batch_bytes bytes. Blocking.
 * CUDA backend: ids and rows in host or device memory. With device buffers the call is
 * asynchronous on stream (read rows only after it; see "CUDA backend": dense ids out of range
 * and hashed tables over capacity are found on the device, the call then changes nothing and
 * the next emc_flush returns EMC_ERANGE); with pageable host buffers it waits and returns
 * them.
 * Errors: EMC_EINVAL (as emc_lookup, rows as out), EMC_ERANGE (dense id >= rows; a hashed
 * table would exceed its capacity), EMC_ENOMEM (scratch: the set of new hashed ids, a row
 * buffer; CUDA backend: per-table offsets), EMC_ECUDA, EMC_EDEVMEM (CUDA scratch buffers),
 * EMC_ECORRUPT (a shared store whose lock, or id map, another process wrote over: the rows
 * before the bad id are inserted). Checked before anything changes but the last. */
EMC_API emc_status emc_insert(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                              const void *rows, void *stream);

/* Write every dirty row back to the store (rows stay cached, now clean).
 * Host backend with the admission thread (EMC_ADMISSION_BACKGROUND, or AUTO that chose it):
 * first waits until the misses of every lookup that returned before the call are admitted or
 * skipped (stats read after it count them; lookups running meanwhile do not hold it back).
 * CUDA backend: enqueued on stream, then waits for it. After flushing it reports what the
 * asynchronous calls since the last flush met, the first as the status and all in the detail:
 * EMC_ERANGE for lookups with device ids out of range (they read zero rows) and for training
 * calls or inserts refused on the device (they changed nothing), EMC_ECAPACITY for a refused
 * emc_apply_gradients batch or rows prefetches could not pin, EMC_ECUDA for writer calls that
 * ran at once (see "CUDA backend", Graphs). Errors: EMC_EINVAL (NULL; CUDA backend: stream is
 * being captured, since the call waits), EMC_ENOMEM (CUDA: a copy of the counters), EMC_ECUDA,
 * EMC_EDEVMEM (a CUDA call failed); the host backend never fails on a valid cache. Blocking. */
EMC_API emc_status emc_flush(emc_cache *c, void *stream);

typedef struct emc_stats {
  uint64_t lookups;        /* ids looked up (positions, duplicates counted) */
  uint64_t hits;           /* positions served from a cache slot */
  uint64_t misses;         /* positions served from the store */
  uint64_t absent;         /* positions whose hashed id was absent (zero row); not in misses */
  uint64_t admissions;     /* rows copied into the cache after a miss */
  uint64_t admit_skipped;  /* misses not admitted (writer lock busy, no room, pool full,
                              the background admission queue full) */
  uint64_t inserts;        /* rows written by emc_insert */
  uint64_t evictions;      /* rows evicted */
  uint64_t writebacks;     /* dirty rows written back to the store */
  uint64_t evict_passes;   /* eviction passes run */
  uint64_t retries;        /* optimistic reads that failed validation and were redone */
  uint64_t unified_hits;   /* misses resolved to a host row by a unified-index entry */
  uint64_t rows_cached;    /* rows resident now, all tables */
  uint64_t bytes_in_use;   /* bytes of resident rows (slot stride * rows) */
  uint64_t bytes_reserved; /* bytes of pool pages held by tables */
  uint64_t capacity_bytes; /* the budget */
  uint64_t index_bytes;    /* bytes of the index (keys, entry words, LRU stamps) and of the
                              per-slot metadata in pages (free bitmaps, hashed tables' owner
                              ids); page headers and row alignment are not counted */
  uint64_t dirty_rows;     /* rows inserted and not yet written back */
  uint64_t prefetched;     /* distinct rows emc_prefetch pinned (admitted first when missing) */
  uint64_t pinned_rows;    /* rows pinned now by the live prefetch window */
  uint64_t pinned_bytes;   /* their slot bytes (<= t2 * capacity_bytes) */
  uint64_t pin_shortfall;  /* distinct rows emc_prefetch could not pin (the pin budget; host
                              backend: also a key held by another, pinned id) */
  uint64_t gradient_rows;  /* distinct rows emc_apply_gradients updated */
  uint64_t host_syncs;     /* CUDA backend: times a call waited, on the host, for the device
                              (a stream or event synchronize, a blocking copy the library made
                              itself: host buffers, device offsets, 16 calls in flight, slot
                              growth, emc_flush), emc_get_stats' own waits not counted: two
                              readings differ by what the calls between them waited; 0 on
                              the host backend */
} emc_stats;

/* Read counters (monotonic) and gauges (now). Host backend with the admission thread
 * (EMC_ADMISSION_BACKGROUND, or AUTO that chose it): misses of lookups that returned may not
 * be admitted (admissions, evictions, rows and bytes) yet; after emc_flush they are. CUDA
 * backend: read through a private stream (lookup streams are not stalled); a call still
 * running on the device may be half counted.
 * Errors: EMC_EINVAL (NULL), EMC_ECUDA, EMC_EDEVMEM (CUDA backend: reading the device
 * counters failed), EMC_ENOMEM (CUDA backend: a scratch buffer for the per-table counters).
 * The host backend fails only on NULL. */
EMC_API emc_status emc_get_stats(const emc_cache *c, emc_stats *out);

/* Rows of table `table` resident now. Errors: EMC_EINVAL (NULL), EMC_ERANGE (table),
 * EMC_ECUDA, EMC_EDEVMEM (CUDA backend: reading the device counters failed). */
EMC_API emc_status emc_get_table_rows_cached(const emc_cache *c, uint32_t table,
                                             uint64_t *out);

/* The global key of (table, id) under this cache's codec, and the Huffman code of the
 * table (code right-aligned in *code, its length in *code_bits); any output may be NULL.
 * Errors: EMC_EINVAL (NULL cache), EMC_ERANGE (table, dense id >= rows). */
EMC_API emc_status emc_cache_global_key(const emc_cache *c, uint32_t table, uint64_t id,
                                        uint64_t *key, uint64_t *code, uint32_t *code_bits);

/* ------------------------------------------------------------------ training
 * A trainer's step: emc_prefetch(batch i+1) (on a side stream), emc_lookup(batch i),
 * forward/backward, emc_apply_gradients(batch i). Rows stay in the cache, updated and dirty,
 * and reach the store on eviction, emc_flush or emc_cache_destroy (over a shared store they
 * are written through at once, and stay clean). All three calls, with
 * emc_dedup, may be called concurrently with lookups from any thread. */

typedef enum emc_optimizer_kind {
  EMC_OPT_SGD = 0,            /* w = fmaf(-lr, g, w) per element */
  EMC_OPT_ROWWISE_ADAGRAD = 1 /* one accumulator per row (EMC_STATE_ADAGRAD tables only) */
} emc_optimizer_kind;

typedef enum emc_grad_merge {
  EMC_MERGE_SUM = 0, /* duplicate ids of one call: their gradients summed */
  EMC_MERGE_MEAN = 1 /* ... summed, then divided by the number of positions (the average over
                        the places the row occurred) */
} emc_grad_merge;

typedef struct emc_optimizer {
  size_t struct_size;        /* set by emc_optimizer_init */
  emc_optimizer_kind kind;   /* default SGD */
  emc_grad_merge merge;      /* how gradients of duplicate ids in one call combine; default SUM */
  float lr;                  /* learning rate, finite; default 0.01 */
  float eps;                 /* Adagrad: finite, >= 0; default 1e-8 */
  float initial_accumulator; /* Adagrad: finite, >= 0; the accumulator a row starts from: the
                                step uses initial_accumulator + the row's stored sum; default 0 */
} emc_optimizer;

/* Fill *o with the defaults above and set struct_size. NULL is ignored. */
EMC_API void emc_optimizer_init(emc_optimizer *o);

/* Make every row of a batch resident (admitting the missing ones, evicting unpinned
 * least-recently-used rows as needed) and pin it: a row pinned by a prefetch stays pinned,
 * never evicted, through the next cfg.prefetch_depth prefetch calls on this cache, and the
 * one after releases it (unless a later prefetch in the window pinned it again). Pins expire
 * by themselves: there is no release call. The rows pinned by the live window (this call and
 * the prefetch_depth before it) may take at most t2 * capacity_bytes; when a batch's rows do
 * not fit, the call pins what fits, leaves the rest unpinned (a later lookup reads them from
 * the store: still correct) and returns EMC_ECAPACITY, the detail naming how many rows and
 * bytes did not fit. Hashed ids absent from the store are skipped (they read as zero rows).
 * Key collisions (hashed tables; likely with key_bits 32): the index keeps one entry per
 * global key, so of two ids of a table sharing a key only one can be cached. Host backend:
 * a prefetched id whose key another id holds unpinned takes the key (the holder is evicted,
 * its row written back first when dirty); when the holder is pinned (by this call, e.g. both
 * ids in one batch, or a live earlier prefetch) the id is not cached, counts in
 * stats.pin_shortfall, and the call returns EMC_ECAPACITY. So an EMC_OK prefetch made every
 * row with a store row resident and pinned. (CUDA backend: such an id is still skipped,
 * neither pinned nor counted.)
 *   ids, offsets: a batch as for emc_lookup (see "Batches"), the same memory spaces.
 * Host backend: stream NULL (ignored); blocking. CUDA backend: with device ids asynchronous
 * on stream; a lookup of the batch on any stream after the prefetch has completed is all hits
 * (rows that fit); the EMC_ECAPACITY of an asynchronous prefetch is returned by the next
 * emc_prefetch or emc_flush (and counted in stats.pin_shortfall). The first prefetch of a
 * larger batch than any before grows the pin lists (one wait for the writer stream): it cannot
 * be captured into a graph, and graphs captured from the cache fix the largest batch.
 * Errors: EMC_EINVAL (NULL cache, NULL ids with ids, bad offsets, n >= 2^32; CUDA backend:
 * n >= 2^31 - 1, the bound of CUB's sort; device or pinned ids off their alignment),
 * EMC_ERANGE (a dense id >= rows; CUDA backend with device or pinned ids: reported by the
 * next emc_flush, the call then changes nothing), EMC_ECAPACITY (above: over the pin budget,
 * or a key held by a pinned id; the other rows are pinned), EMC_ENOMEM, EMC_EDEVMEM,
 * EMC_ECUDA, EMC_ECORRUPT (a shared store whose lock was written over). Nothing
 * changes on the other errors. */
EMC_API emc_status emc_prefetch(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                void *stream);

/* Apply one optimizer step to the rows of a batch inside the cache, where they stay dirty
 * (over a shared store: written through to the store as well, and clean).
 *   grads: packed like emc_lookup's out, but always f32: table t's positions hold (n_t, dim)
 *          floats, whatever the table's dtype. Same memory space rules as out.
 * For each distinct (table, id) of the batch: g = the gradients of its positions summed in
 * increasing position order in f32, divided by the number of positions for EMC_MERGE_MEAN.
 *   SGD: every element w = fmaf(-lr, g, w) in f32 (one rounding), stored in the table's dtype
 *        (f16: round to nearest even).
 *   Row-wise Adagrad (EMC_STATE_ADAGRAD tables): s = initial_accumulator + stored sum;
 *        stored sum += mean_j(g_j * g_j) (summed in element order, divided by dim);
 *        w_j = w_j - (lr * g_j) / (sqrtf(s') + eps) with s' the new accumulator, each
 *        operation rounded in f32 (no fused multiply-add). Every table with ids in the batch
 *        must keep the accumulator; tables without ids in it may lack it, so a model that
 *        trains some tables with SGD and others with Adagrad calls once per optimizer, each
 *        batch holding only its tables' ids (empty segments elsewhere). CUDA backend: refused
 *        when any table of the store lacks it (offsets may be device memory).
 * Rows not in the cache are admitted from the store first (evicting unpinned rows as needed),
 * or updated in the store when the cache has no room left. Hashed ids absent from the store
 * get a store row (zero, then updated), as emc_insert does. Cached training is thus
 * bitwise-equal to updating the store directly. A batch whose distinct rows alone take more
 * slot bytes than the cache ever holds (t1 * capacity_bytes) is refused (EMC_ECAPACITY).
 * Host backend: host pointers, stream NULL; blocking. CUDA backend: device or host pointers;
 * with device buffers asynchronous on stream: no host wait, no host copy of the ids; dense
 * ids out of range and hashed tables over capacity are then found on the device, the call
 * changes nothing and the next emc_flush returns the error.
 * Errors: EMC_EINVAL (NULL cache / grads with ids / opt, bad offsets, opt->struct_size not
 * sizeof(emc_optimizer), an unknown kind or merge, lr, eps or initial_accumulator NaN or
 * infinite, eps or initial_accumulator negative, row-wise Adagrad with ids in a table without
 * EMC_STATE_ADAGRAD (CUDA backend: any table of the store without it), n >= 2^32 (CUDA
 * backend: n >= 2^31 - 1, the bound of CUB's sort; device or pinned ids or grads off their
 * alignment)),
 * EMC_ERANGE (a dense id >= rows, a hashed table would exceed its capacity), EMC_ECAPACITY
 * (above), EMC_ENOMEM, EMC_EDEVMEM, EMC_ECUDA, EMC_ECORRUPT (a shared store whose lock or
 * id map was written over: the rows before the bad id are stepped). All but the last are
 * found before anything changes. */
EMC_API emc_status emc_apply_gradients(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                       const void *grads, const emc_optimizer *opt, void *stream);

/* The distinct ids of each table of a batch, in order of first occurrence, as a batch of the
 * same shape, and for every position the index of its id in that batch:
 *   unique_ids:     (n,) the distinct ids, table by table (at most n entries are written)
 *   unique_offsets: (n_tables + 1,) offsets of the unique batch (unique_offsets[0] = 0)
 *   inverse:        (n,) inverse[p] = the unique batch's position of position p's id, so
 *                   unique_ids[inverse[p]] == ids[p]
 * n = offsets[n_tables]; buffers are sized for the worst case, n. A trainer looks the unique
 * batch up once per distinct row and gathers by inverse (seed B's "distinct embeddings plus an
 * index vector"). Dense ids are checked as by emc_lookup.
 * Host backend: host pointers, stream NULL; blocking. CUDA backend: device or host pointers;
 * with device buffers asynchronous on stream (unique_offsets may be read once stream has
 * completed; with pageable host buffers the call waits).
 * Errors: EMC_EINVAL (NULL arguments with ids, bad offsets, n >= 2^32; CUDA backend:
 * n >= 2^31 - 1, the bound of CUB's sort; device or pinned buffers off their alignment),
 * EMC_ERANGE (a dense id >= rows; CUDA with device or pinned ids: the next emc_flush),
 * EMC_ENOMEM, EMC_EDEVMEM, EMC_ECUDA.
 * Outputs are untouched on error. */
EMC_API emc_status emc_dedup(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                             uint64_t *unique_ids, uint64_t *unique_offsets, uint32_t *inverse,
                             void *stream);

/* The optimizer state of n rows of a table (EMC_STATE_ADAGRAD: one float per row, the stored
 * sum of mean squared gradients) into out (n floats). A hashed id that is absent reads 0. With
 * a cache attached to a private store the store may be behind the cache: emc_flush first (a
 * shared store always holds its caches' writes).
 * Errors: EMC_EINVAL (NULL with n > 0, n ids whose byte size overflows, a table without
 * state), EMC_ERANGE (table, dense id >= rows), EMC_ENOMEM. Blocking; out is untouched on
 * failure. */
EMC_API emc_status emc_store_read_state(const emc_store *s, uint32_t table, const uint64_t *ids,
                                        size_t n, float *out);

/* ------------------------------------------------------------ training groups
 * N trainer processes (or threads), each with its own host cache over one shared store, step
 * together (seed document D): every rank calls emc_group_apply_gradients once per step with
 * its own batch and gradients, and the merged sparse update of all ranks is applied once to
 * the shared rows. For each distinct (table, id) of the step, g_r is the sum of rank r's
 * gradients for it in increasing position order and G the sum of the g_r in increasing rank
 * order; with EMC_MERGE_MEAN, G is then divided by the number of ranks in which the row
 * occurred (within one rank gradients are summed, whatever the merge). The optimizer step
 * (emc_apply_gradients' arithmetic: SGD, row-wise Adagrad) is applied to each row once, from
 * its stored value: the store afterwards is bitwise what one process gets by applying G, row
 * by row, to a plain copy of it (emc_apply_gradients with each row once and its G). Rows the
 * step wrote are dropped from every cache over the store (the update log), so every rank's
 * cache holds the same bits afterwards.
 * The merged update is computed by one rank (the first to see every rank arrive) and staged,
 * as whole new rows, in shared memory before any row changes. Its rows are then written one
 * by one under the store's lock: a reader may see a step part-way, but whoever takes the lock
 * next sees the store after a whole number of steps (a step whose applier died after staging
 * it is completed by the next process that takes the lock, a waiting rank, or the next
 * emc_group_join, before anything else is written). If a rank dies, leaves, or does not
 * arrive within timeout_ms of this rank's arrival, every rank's call returns EMC_ETIMEDOUT
 * for that step (after at most timeout_ms, plus about 10 ms to notice a death; claiming the
 * step and breaking the group at it are one atomic decision, so ranks never disagree on
 * whether it happened), and the group is broken: every later step returns EMC_ETIMEDOUT
 * until all ranks have left and a new group is joined. Once a rank has claimed a step the
 * others wait for it while its process lives. Ranks must share a PID namespace (a rank is
 * seen dead by its pid and start time). Each rank's staging memory is the POSIX shared memory
 * "<store name>.g<rank>" (removed by emc_group_leave). One thread at a time per emc_group;
 * ranks may be threads of one process, each with its own group handle. A rank's cache may be a
 * host or a CUDA cache (ids, offsets and grads then in device or host memory, read after
 * `stream`; the call waits for them and returns with the cache's copies refreshed). */
typedef struct emc_group emc_group;

/* Join the training group of shared store s as rank `rank` of `n_ranks` (<= 256). The first
 * rank to join forms the group; the others must give the same n_ranks. Does not wait for the
 * others (the first step does). Errors: EMC_EINVAL (NULL, a private store, n_ranks 0 or > 256,
 * rank >= n_ranks, n_ranks other than the group's, a rank already joined by a live process,
 * timeout_ms 0, a store name too long for "<name>.g<rank>"), EMC_ETIMEDOUT (the group is
 * broken and some of its ranks have not left yet), EMC_EIO / EMC_ENOMEM (the staging
 * memory), EMC_ECORRUPT (the segment's lock was written over). Nothing of the group is
 * changed on failure, except that ranks whose process is gone are removed from it (and the
 * group is then broken) and a step a dead rank had committed is completed. Blocking. */
EMC_API emc_status emc_group_join(emc_store *s, uint32_t rank, uint32_t n_ranks,
                                  uint32_t timeout_ms, emc_group **out);
/* One collective sparse step: every rank calls it once per step with its own batch and
 * gradients (packed as for emc_apply_gradients; every rank with the same optimizer), and it
 * returns when the merged update is applied. c is this rank's host cache over the store the
 * group was joined on (the same emc_store). stream: ignored (host caches).
 * Errors: EMC_EINVAL (NULL group; this rank's own batch or optimizer is bad, as for
 * emc_apply_gradients, or its cache serves another emc_store: this rank returns its own
 * reason and the step is refused for every rank, the others getting the same status naming
 * the rank; ranks with different optimizers; Adagrad on a table without state), EMC_ERANGE
 * (likewise, a dense id >= rows; the step's new hashed ids exceed a table's free capacity),
 * EMC_EIO (a staging segment cannot be grown or mapped), EMC_ENOMEM, EMC_ETIMEDOUT (above),
 * EMC_ECORRUPT (shared memory written over). A refused step changes nothing, for any rank. */
EMC_API emc_status emc_group_apply_gradients(emc_group *g, emc_cache *c, const uint64_t *ids,
                                             const uint64_t *offsets, const void *grads,
                                             const emc_optimizer *opt, void *stream);
/* Leave the group and free g (NULL is fine). The others' later steps return EMC_ETIMEDOUT;
 * when every rank has left, a new group may form. Errors: EMC_ECORRUPT (the segment's lock
 * was written over; g is freed anyway). Blocking. */
EMC_API emc_status emc_group_leave(emc_group *g);

#ifdef __cplusplus
}
#endif
#endif /* EMBCACHE_H */
