/* tctx: the storage of the per-thread context (tctx.h has the accessors
 * and the rules). Zero-initialized in every thread: no id read yet,
 * outside the GC, not samprof's, no heap countdown drawn. */
#include "tctx.h"

TCTX_TLS int32_t tctx_tid_cache;
TCTX_TLS uint8_t tctx_gc_depth_flag;
TCTX_TLS uint8_t tctx_samprof_flag;
TCTX_TLS tctx_heap_t tctx_heap_state;
