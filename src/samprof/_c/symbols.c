/* symbols: code objects to pprof functions and locations.
 *
 * Two caches make symbolization cheap in the steady state: a frame seen
 * before costs one hash lookup. Function identity is (qualified name,
 * absolute file name, first line), so a function re-created by exec or a
 * module reload maps to the same pprof function. */
#include "symbols.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frames.h"

typedef struct {
    void *code;
    int64_t offset;
} symbols_loc_key_t;

int
symbols_init(symbols_t *s, profile_t *profile, PyObject *hidden_file)
{
    memset(s, 0, sizeof(*s));
    s->profile = profile;
    s->hidden_file = hidden_file;
    Py_XINCREF(hidden_file);
    if (htab_init(&s->code_fn, 256) < 0 || htab_init(&s->code_loc, 1024) < 0) {
        symbols_free(s);
        return -1;
    }
    char buf[PATH_MAX];
    if (getcwd(buf, sizeof(buf)) != NULL) {
        s->cwd_len = strlen(buf);
        s->cwd = malloc(s->cwd_len + 1);
        if (s->cwd != NULL) {
            memcpy(s->cwd, buf, s->cwd_len + 1);
        }
        else {
            s->cwd_len = 0;
        }
    }
    return 0;
}

void
symbols_free(symbols_t *s)
{
    htab_free(&s->code_fn);
    htab_free(&s->code_loc);
    free(s->cwd);
    Py_XDECREF(s->hidden_file);
    memset(s, 0, sizeof(*s));
}

static uint32_t
symbols_intern_str(symbols_t *s, PyObject *str)
{
    Py_ssize_t len;
    const char *utf8;
    if (str == NULL || !PyUnicode_Check(str)) {
        return profile_string(s->profile, "?", 1);
    }
    utf8 = PyUnicode_AsUTF8AndSize(str, &len);
    if (utf8 == NULL) {
        /* Lone surrogates cannot be UTF-8: show a placeholder. */
        PyErr_Clear();
        return profile_string(s->profile, "?", 1);
    }
    return profile_string(s->profile, utf8, (size_t)len);
}

/* File names relative to the working directory at start are made absolute;
 * pseudo-files such as "<string>" stay as they are. */
static uint32_t
symbols_intern_filename(symbols_t *s, PyObject *str)
{
    Py_ssize_t len;
    const char *utf8;
    if (str == NULL || !PyUnicode_Check(str)
        || (utf8 = PyUnicode_AsUTF8AndSize(str, &len)) == NULL) {
        PyErr_Clear();
        return profile_string(s->profile, "?", 1);
    }
    if (len == 0 || utf8[0] == '/' || utf8[0] == '<' || s->cwd_len == 0) {
        return profile_string(s->profile, utf8, (size_t)len);
    }
    size_t total = s->cwd_len + 1 + (size_t)len;
    char *joined = malloc(total);
    if (joined == NULL) {
        return profile_string(s->profile, utf8, (size_t)len);
    }
    memcpy(joined, s->cwd, s->cwd_len);
    joined[s->cwd_len] = '/';
    memcpy(joined + s->cwd_len + 1, utf8, (size_t)len);
    uint32_t id = profile_string(s->profile, joined, total);
    free(joined);
    return id;
}

static uint32_t
symbols_function(symbols_t *s, PyObject *code)
{
    uint64_t id;
    if (htab_get(&s->code_fn, &code, sizeof(code), &id)) {
        return (uint32_t)id;
    }
    PyCodeObject *co = (PyCodeObject *)code;
    uint32_t name = symbols_intern_str(s, frames_code_name(code));
    uint32_t file = symbols_intern_filename(s, co->co_filename);
    uint32_t fn = profile_function(s->profile, name, file, co->co_firstlineno);
    if (fn != 0 && htab_put(&s->code_fn, &code, sizeof(code), fn) < 0) {
        return fn; /* uncached: correct, just slower next time */
    }
    return fn;
}

static uint32_t
symbols_location_slow(symbols_t *s, PyObject *code, int32_t offset)
{
    symbols_loc_key_t key;
    memset(&key, 0, sizeof(key));
    key.code = code;
    key.offset = offset;
    uint64_t id;
    if (htab_get(&s->code_loc, &key, sizeof(key), &id)) {
        return (uint32_t)id;
    }
    PyObject *file = ((PyCodeObject *)code)->co_filename;
    if (s->hidden_file != NULL && file != NULL && PyUnicode_Check(file)) {
        int hidden = PySequence_Contains(s->hidden_file, file);
        if (hidden < 0) {
            PyErr_Clear();
        }
        else if (hidden) {
            (void)htab_put(&s->code_loc, &key, sizeof(key), SYMBOLS_HIDDEN);
            return SYMBOLS_HIDDEN;
        }
    }
    uint32_t fn = symbols_function(s, code);
    if (fn == 0) {
        return 0;
    }
    int line = frames_line(code, offset);
    uint32_t loc = profile_location(s->profile, fn, line < 0 ? 0 : line);
    if (loc != 0) {
        (void)htab_put(&s->code_loc, &key, sizeof(key), loc);
    }
    return loc;
}

static inline symbols_recent_t *
symbols_recent(symbols_t *s, PyObject *code, int32_t offset)
{
    uint64_t h =
        ((uint64_t)(uintptr_t)code ^ ((uint64_t)(uint32_t)offset << 40))
        * 0x9E3779B97F4A7C15ULL;
    return &s->recent[h >> (64 - SYMBOLS_RECENT_BITS)];
}

uint32_t
symbols_location(symbols_t *s, PyObject *code, int32_t offset)
{
    symbols_recent_t *r = symbols_recent(s, code, offset);
    if (r->code == code && r->offset == offset) {
        return r->loc;
    }
    uint32_t loc = symbols_location_slow(s, code, offset);
    if (loc != 0) {
        r->code = code;
        r->offset = offset;
        r->loc = loc;
    }
    return loc;
}

int
symbols_forget(symbols_t *s, PyObject *code)
{
    if (!htab_del(&s->code_fn, &code, sizeof(code))) {
        return 0;
    }
    /* Locations are keyed by (code, offset) and this code had some: drop
     * them all rather than keep a per-code index. Code objects that were
     * sampled die rarely outside of exec-heavy programs. */
    htab_clear(&s->code_loc);
    memset(s->recent, 0, sizeof(s->recent));
    return 1;
}

/* ------------------------------------------------------------------------
 * Code-object death notification.
 * ---------------------------------------------------------------------- */

/* Who to tell. Written under the GIL by watch/unwatch. */
static void (*symbols_on_death)(PyObject *code);

#if PY_VERSION_HEX >= 0x030C0000

static int symbols_watcher_id = -1; /* PyCode_AddWatcher id, GIL */

static int
symbols_code_event(PyCodeEvent event, PyCodeObject *co)
{
    if (event == PY_CODE_EVENT_DESTROY && symbols_on_death != NULL) {
        symbols_on_death((PyObject *)co);
    }
    return 0;
}

int
symbols_watch(void (*on_death)(PyObject *code))
{
    symbols_on_death = on_death;
    if (symbols_watcher_id < 0) {
        symbols_watcher_id = PyCode_AddWatcher(symbols_code_event);
        if (symbols_watcher_id < 0) {
            symbols_on_death = NULL;
            return -1;
        }
    }
    return 0;
}

void
symbols_unwatch(void)
{
    symbols_on_death = NULL;
    if (symbols_watcher_id >= 0) {
        if (PyCode_ClearWatcher(symbols_watcher_id) < 0) {
            PyErr_Clear();
        }
        symbols_watcher_id = -1;
    }
}

#else

/* Before 3.12 there is no code watcher. PyCode_Type's tp_dealloc is
 * wrapped instead, only while profiling: _Py_Dealloc reads the slot at
 * every call, and deallocation happens under the GIL, as does the swap. */
static destructor symbols_orig_dealloc; /* CPython's code_dealloc, GIL */

static void
symbols_code_dealloc(PyObject *co)
{
    if (symbols_on_death != NULL) {
        symbols_on_death(co);
    }
    symbols_orig_dealloc(co);
}

int
symbols_watch(void (*on_death)(PyObject *code))
{
    symbols_on_death = on_death;
    if (symbols_orig_dealloc == NULL) {
        symbols_orig_dealloc = PyCode_Type.tp_dealloc;
        PyCode_Type.tp_dealloc = symbols_code_dealloc;
    }
    return 0;
}

void
symbols_unwatch(void)
{
    symbols_on_death = NULL;
    if (symbols_orig_dealloc != NULL) {
        PyCode_Type.tp_dealloc = symbols_orig_dealloc;
        symbols_orig_dealloc = NULL;
    }
}

#endif
