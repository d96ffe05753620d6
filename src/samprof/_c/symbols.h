/* symbols: turns (code object, instruction offset) pairs from samples into
 * profile location ids, and learns when code objects die.
 *
 * Caches are keyed by code object address, so an address reused by a new
 * code object would be misnamed: every code object's death is reported
 * (a code watcher on 3.12+, a tp_dealloc hook before) and its entries are
 * dropped then, after the ring was drained of samples that point to it. */
#ifndef SAMPROF_SYMBOLS_H
#define SAMPROF_SYMBOLS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "htab.h"
#include "profile.h"

/* Entries of the direct-mapped cache in front of code_loc. */
#define SYMBOLS_RECENT_BITS 10
#define SYMBOLS_RECENT (1 << SYMBOLS_RECENT_BITS)

typedef struct {
    PyObject *code; /* NULL: empty */
    int32_t offset;
    uint32_t loc;
} symbols_recent_t;

typedef struct {
    profile_t *profile; /* where functions and locations are interned */
    htab_t code_fn;     /* code address -> function id. GIL. */
    htab_t code_loc;    /* (code address, offset) -> location id. GIL. */
    /* The last answers of code_loc, by a hash of (code, offset): most
     * frames of a sample repeat the previous samples', and this spares
     * them the table's hashing and key comparison. Cleared with
     * code_loc. GIL. */
    symbols_recent_t recent[SYMBOLS_RECENT];
    char *cwd; /* prefix for relative file names, malloc'ed */
    size_t cwd_len;
    PyObject *hidden_file; /* tuple of file names whose frames are
                              samprof's own and are left out; strong
                              reference or NULL */
} symbols_t;

/* symbols_location's answer for a frame that must not be shown. */
#define SYMBOLS_HIDDEN UINT32_MAX

/* hidden_file (a tuple of str, or NULL) names samprof's own Python
 * modules, whose frames (start, stop, the CLI runner...) never appear.
 * Returns 0, or -1 when out of memory. Caller holds the GIL. */
int symbols_init(symbols_t *s, profile_t *profile, PyObject *hidden_file);
void symbols_free(symbols_t *s);

/* The location id for a frame, SYMBOLS_HIDDEN for samprof's own frames,
 * or 0 when out of memory (the frame is then
 * shown as unknown by the caller). Caller holds the GIL; code is alive. */
uint32_t symbols_location(symbols_t *s, PyObject *code, int32_t offset);

/* Forgets everything cached about code, which is being destroyed.
 * Returns 1 when something was cached. Caller holds the GIL. */
int symbols_forget(symbols_t *s, PyObject *code);

/* Calls on_death(code) under the GIL just before any code object is
 * destroyed, until symbols_unwatch. Returns 0, or -1 with an exception. */
int symbols_watch(void (*on_death)(PyObject *code));
void symbols_unwatch(void);

#endif
