/* labels: the samprof.labels type, the label-set registry, and the
 * context variable that carries the current set.
 *
 * Everything here runs with the GIL held, which protects the registry and
 * the merge cache, except labels_of(), which the signal handler calls. Ids
 * are never reused: a sample's id means the same labels forever.
 *
 * The current set is the value of a context variable, so that it follows
 * the execution context as any ContextVar does: each thread has its own,
 * each asyncio task its own (inheriting its creator's), and
 * asyncio.to_thread and copy_context().run take it along. A block sets a
 * node {id, outer} and puts back outer at its exit; nothing is kept per
 * labels object, so one object may be entered by concurrent tasks.
 *
 * The samplers read the variable without calling into Python: labels_of
 * walks the thread's current context's HAMT (CPython's immutable mapping
 * behind contexts) by hand, following pointers only, which is safe in a
 * signal handler on that thread: only that thread changes its context,
 * and a HAMT never changes once built. The node layouts are CPython's
 * (Python/hamt.c, the same from 3.9 to 3.13); labels_init_type checks
 * them against real contexts and, if they do not match, samples carry no
 * labels (labels_in_samples() says so) rather than guess. */
#include "labels.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* A HAMT and its nodes, as Python/hamt.c lays them out. A bitmap node
 * holds key/value pairs (key NULL: the value is a sub-node) for the bits
 * set in its bitmap; an array node has 32 sub-nodes; a collision node
 * (keys whose 32-bit hashes are equal) is not followed. */
typedef struct {
    PyObject_HEAD
    PyObject *h_root;
    PyObject *h_weakreflist;
    Py_ssize_t h_count;
} labels_hamt_t;

typedef struct {
    PyObject_VAR_HEAD
    uint32_t b_bitmap;
    PyObject *b_array[1];
} labels_hamt_bitmap_t;

typedef struct {
    PyObject_HEAD
    PyObject *a_array[32];
    Py_ssize_t a_count;
} labels_hamt_array_t;

/* PyContext, as Include/internal/pycore_context.h lays it out. */
typedef struct {
    PyObject_HEAD
    PyObject *ctx_prev;
    labels_hamt_t *ctx_vars;
} labels_context_t;

/* The variable's value: a label set and the node its block replaced. */
typedef struct {
    PyObject_HEAD
    uint32_t id;
    PyObject *outer; /* a labels_node_t, or NULL: none */
} labels_node_t;

static PyTypeObject labels_node_type;

typedef struct {
    PyObject_HEAD
    PyObject *pairs;     /* tuple of (key, value) in call order */
    uint32_t last_outer; /* one-entry merge cache: outer id ... */
    uint32_t last_id;    /* ... and the merged id (0 = empty cache) */
} labels_object;

/* Registered label sets, id = index + 1. GIL. */
static PyObject *labels_sets;
/* Sorted pairs tuple -> id, so equal sets share an id. GIL. */
static PyObject *labels_ids;
/* (outer id, block pairs) -> merged id. GIL. */
static PyObject *labels_merged;
/* The context variable, its hash as the HAMT folds it, and the node
 * types; readable by labels_of once labels_walk_ok is set. */
static PyObject *labels_var;
static uint32_t labels_var_hash;
static PyTypeObject *labels_bitmap_type;
static PyTypeObject *labels_array_type;
static int labels_walk_ok;

PyObject *
labels_registry(void)
{
    return labels_sets;
}

int
labels_in_samples(void)
{
    return labels_walk_ok;
}

uint32_t
labels_register(PyObject *pairs)
{
    PyObject *id = PyDict_GetItemWithError(labels_ids, pairs);
    if (id != NULL) {
        return (uint32_t)PyLong_AsUnsignedLong(id);
    }
    if (PyErr_Occurred() || PyList_Append(labels_sets, pairs) < 0) {
        return 0;
    }
    Py_ssize_t n = PyList_GET_SIZE(labels_sets);
    id = PyLong_FromSsize_t(n);
    if (id == NULL || PyDict_SetItem(labels_ids, pairs, id) < 0) {
        Py_XDECREF(id);
        return 0;
    }
    Py_DECREF(id);
    return (uint32_t)n;
}

/* The value of var in the context ctx, following pointers only; NULL when
 * it has none (or the walk meets anything it does not know). */
static PyObject *
labels_find(PyObject *ctx, PyObject *var, uint32_t hash)
{
    if (ctx == NULL || Py_TYPE(ctx) != &PyContext_Type) {
        return NULL;
    }
    labels_hamt_t *h = ((labels_context_t *)ctx)->ctx_vars;
    PyObject *node = h != NULL ? h->h_root : NULL;
    for (uint32_t shift = 0; node != NULL && shift <= 30; shift += 5) {
        uint32_t slot = (hash >> shift) & 0x1f;
        if (Py_TYPE(node) == labels_array_type) {
            node = ((labels_hamt_array_t *)node)->a_array[slot];
            continue;
        }
        if (Py_TYPE(node) != labels_bitmap_type) {
            return NULL; /* a collision node */
        }
        labels_hamt_bitmap_t *b = (labels_hamt_bitmap_t *)node;
        uint32_t bit = 1u << slot;
        if ((b->b_bitmap & bit) == 0) {
            return NULL;
        }
        Py_ssize_t i =
            2 * (Py_ssize_t)__builtin_popcount(b->b_bitmap & (bit - 1));
        if (i + 1 >= Py_SIZE(b)) {
            return NULL;
        }
        PyObject *key = b->b_array[i];
        if (key == NULL) {
            node = b->b_array[i + 1];
            continue;
        }
        return key == var ? b->b_array[i + 1] : NULL;
    }
    return NULL;
}

uint32_t
labels_of(PyThreadState *ts)
{
    if (!labels_walk_ok || ts == NULL) {
        return 0;
    }
    PyObject *v = labels_find(ts->context, labels_var, labels_var_hash);
    if (v == NULL || Py_TYPE(v) != &labels_node_type) {
        return 0;
    }
    return ((labels_node_t *)v)->id;
}

/* The current node (new reference), or NULL: none, or an error if
 * PyErr_Occurred(). */
static PyObject *
labels_current_node(void)
{
    PyObject *v = NULL;
    if (PyContextVar_Get(labels_var, NULL, &v) < 0) {
        return NULL;
    }
    if (v != NULL && Py_TYPE(v) != &labels_node_type) {
        Py_DECREF(v);
        return NULL;
    }
    return v;
}

uint32_t
labels_current(void)
{
    PyObject *v = labels_current_node();
    uint32_t id = v != NULL ? ((labels_node_t *)v)->id : 0;
    Py_XDECREF(v);
    return id;
}

/* Makes id the current set, remembering outer (a node, or NULL; stolen)
 * as the one to put back. 0, or -1 with an exception set. */
static int
labels_push(uint32_t id, PyObject *outer)
{
    labels_node_t *n = PyObject_New(labels_node_t, &labels_node_type);
    if (n == NULL) {
        Py_XDECREF(outer);
        return -1;
    }
    n->id = id;
    n->outer = outer;
    PyObject *token = PyContextVar_Set(labels_var, (PyObject *)n);
    Py_DECREF(n);
    if (token == NULL) {
        return -1;
    }
    Py_DECREF(token);
    return 0;
}

/* The slow path: merge the outer set with the block's pairs (block wins),
 * sort by key, register. Returns the id, or 0 with an exception. */
static uint32_t
labels_merge(uint32_t outer, PyObject *pairs)
{
    PyObject *merged = PyDict_New();
    if (merged == NULL) {
        return 0;
    }
    uint32_t result = 0;
    if (outer != 0) {
        PyObject *outer_pairs = PyList_GET_ITEM(labels_sets, outer - 1);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(outer_pairs); i++) {
            PyObject *kv = PyTuple_GET_ITEM(outer_pairs, i);
            if (PyDict_SetItem(merged, PyTuple_GET_ITEM(kv, 0),
                               PyTuple_GET_ITEM(kv, 1))
                < 0) {
                goto done;
            }
        }
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pairs); i++) {
        PyObject *kv = PyTuple_GET_ITEM(pairs, i);
        if (PyDict_SetItem(merged, PyTuple_GET_ITEM(kv, 0),
                           PyTuple_GET_ITEM(kv, 1))
            < 0) {
            goto done;
        }
    }
    PyObject *items = PyDict_Items(merged);
    if (items == NULL || PyList_Sort(items) < 0) {
        Py_XDECREF(items);
        goto done;
    }
    PyObject *sorted = PyList_AsTuple(items);
    Py_DECREF(items);
    if (sorted == NULL) {
        goto done;
    }
    if (PyTuple_GET_SIZE(sorted) > 64) {
        PyErr_SetString(PyExc_ValueError, "at most 64 labels may be active");
    }
    else {
        result = labels_register(sorted);
    }
    Py_DECREF(sorted);
done:
    Py_DECREF(merged);
    return result;
}

static PyObject *
labels_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0) {
        PyErr_SetString(PyExc_TypeError,
                        "labels takes keyword arguments only: "
                        "labels(route=\"/wiki\")");
        return NULL;
    }
    PyObject *items = kwargs ? PyDict_Items(kwargs) : PyList_New(0);
    if (items == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *kv = PyList_GET_ITEM(items, i);
        PyObject *v = PyTuple_GET_ITEM(kv, 1);
        if (!PyUnicode_Check(v)) {
            PyErr_Format(PyExc_TypeError, "label %S=%R: values must be str",
                         PyTuple_GET_ITEM(kv, 0), v);
            Py_DECREF(items);
            return NULL;
        }
    }
    labels_object *self = (labels_object *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(items);
        return NULL;
    }
    self->pairs = PyList_AsTuple(items);
    Py_DECREF(items);
    if (self->pairs == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void
labels_dealloc(labels_object *self)
{
    Py_XDECREF(self->pairs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
labels_enter(labels_object *self, PyObject *noargs)
{
    (void)noargs;
    PyObject *outer_node = labels_current_node();
    if (outer_node == NULL && PyErr_Occurred()) {
        return NULL;
    }
    uint32_t outer = outer_node ? ((labels_node_t *)outer_node)->id : 0;
    uint32_t id;
    if (self->last_id != 0 && self->last_outer == outer) {
        id = self->last_id;
        goto found;
    }
    PyObject *key = Py_BuildValue("(IO)", outer, self->pairs);
    if (key == NULL) {
        goto error;
    }
    PyObject *cached = PyDict_GetItemWithError(labels_merged, key);
    if (cached != NULL) {
        id = (uint32_t)PyLong_AsUnsignedLong(cached);
    }
    else {
        if (PyErr_Occurred() || (id = labels_merge(outer, self->pairs)) == 0) {
            Py_DECREF(key);
            goto error;
        }
        PyObject *v = PyLong_FromUnsignedLong(id);
        if (v == NULL || PyDict_SetItem(labels_merged, key, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(key);
            goto error;
        }
        Py_DECREF(v);
    }
    Py_DECREF(key);
    self->last_outer = outer;
    self->last_id = id;
found:
    if (labels_push(id, outer_node) < 0) {
        return NULL;
    }
    Py_INCREF(self);
    return (PyObject *)self;
error:
    Py_XDECREF(outer_node);
    return NULL;
}

/* Puts back the set the innermost block of this context replaced. */
static PyObject *
labels_exit(labels_object *self, PyObject *args)
{
    (void)self;
    (void)args;
    PyObject *cur = labels_current_node();
    if (cur == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError,
                            "labels block exited more often than entered");
        }
        return NULL;
    }
    PyObject *outer = ((labels_node_t *)cur)->outer;
    Py_XINCREF(outer);
    Py_DECREF(cur);
    if (outer == NULL) {
        /* Back to no labels: None, which is no node, so that one exit
         * too many is the error above. */
        PyObject *token = PyContextVar_Set(labels_var, Py_None);
        if (token == NULL) {
            return NULL;
        }
        Py_DECREF(token);
        Py_RETURN_FALSE;
    }
    PyObject *token = PyContextVar_Set(labels_var, outer);
    Py_DECREF(outer);
    if (token == NULL) {
        return NULL;
    }
    Py_DECREF(token);
    Py_RETURN_FALSE;
}

static PyObject *
labels_get_pairs(labels_object *self, void *closure)
{
    (void)closure;
    return PyObject_CallOneArg((PyObject *)&PyDict_Type, self->pairs);
}

static PyMethodDef labels_methods[] = {
    {"__enter__", (PyCFunction)labels_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)labels_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef labels_getset[] = {
    {"labels", (getter)labels_get_pairs, NULL,
     "The labels this block sets, as a dict.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject labels_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "samprof._samprof.labels",
    .tp_basicsize = sizeof(labels_object),
    .tp_dealloc = (destructor)labels_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "labels(**kv)\n--\n\n"
              "Context manager that attaches string labels to every sample "
              "the thread takes inside the block.",
    .tp_methods = labels_methods,
    .tp_getset = labels_getset,
    .tp_new = labels_new,
};

static void
labels_node_dealloc(labels_node_t *self)
{
    Py_XDECREF(self->outer);
    PyObject_Free(self);
}

/* Nodes form chains to the outermost block, never cycles: not tracked by
 * the GC. */
static PyTypeObject labels_node_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "samprof._samprof.labelset",
    .tp_basicsize = sizeof(labels_node_t),
    .tp_dealloc = (destructor)labels_node_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The label set in effect in a context (samprof.labels).",
};

/* The HAMT folds Python's 64-bit hash to 32 bits (Python/hamt.c). */
static uint32_t
labels_hamt_hash(PyObject *o)
{
    Py_hash_t h = PyObject_Hash(o);
    int32_t x =
        (int32_t)((uint64_t)h & 0xffffffffu) ^ (int32_t)((uint64_t)h >> 32);
    return (uint32_t)(x == -1 ? -2 : x);
}

static int
labels_type_named(PyObject *o, const char *name)
{
    return o != NULL && strcmp(Py_TYPE(o)->tp_name, name) == 0;
}

/* Sets n variables in a new context and checks that labels_find finds
 * every value by walking it. With one variable the root is a bitmap node;
 * with more, each at another of the root's 32 slots (their names vary
 * their hashes), the root is an array node: a bitmap node holds at most
 * 16. 1 if every value is found; 0 if not; -1 on error. */
static int
labels_check_walk(int n)
{
    PyObject *ctx = PyContext_New();
    PyObject *vars = PyList_New(0);
    uint32_t slots = 0;
    int ok = -1;
    if (ctx == NULL || vars == NULL) {
        goto done;
    }
    for (int i = 0; PyList_GET_SIZE(vars) < n && i < 100000; i++) {
        char name[48];
        snprintf(name, sizeof(name), "samprof.labels.probe%d", i);
        PyObject *var = PyContextVar_New(name, NULL);
        if (var == NULL) {
            goto done;
        }
        uint32_t slot = 1u << (labels_hamt_hash(var) & 0x1f);
        if ((slots & slot) == 0 || n == 1) {
            slots |= slot;
            if (PyList_Append(vars, var) < 0) {
                Py_DECREF(var);
                goto done;
            }
        }
        Py_DECREF(var);
    }
    if (PyList_GET_SIZE(vars) < n || PyContext_Enter(ctx) < 0) {
        goto done;
    }
    for (int i = 0; i < n; i++) {
        PyObject *value = PyLong_FromLong(i);
        PyObject *token =
            value ? PyContextVar_Set(PyList_GET_ITEM(vars, i), value) : NULL;
        Py_XDECREF(value);
        if (token == NULL) {
            PyContext_Exit(ctx);
            goto done;
        }
        Py_DECREF(token);
    }
    labels_hamt_t *h = ((labels_context_t *)ctx)->ctx_vars;
    ok = labels_type_named((PyObject *)h, "hamt") && h->h_count == n;
    if (ok) {
        PyObject *root = h->h_root;
        if (n == 1 && labels_type_named(root, "hamt_bitmap_node")) {
            labels_bitmap_type = Py_TYPE(root);
        }
        else if (n > 16 && labels_type_named(root, "hamt_array_node")) {
            labels_array_type = Py_TYPE(root);
        }
        else {
            ok = 0;
        }
    }
    for (int i = 0; ok && i < n; i++) {
        PyObject *var = PyList_GET_ITEM(vars, i);
        PyObject *v = labels_find(ctx, var, labels_hamt_hash(var));
        ok = v != NULL && PyLong_Check(v) && PyLong_AsLong(v) == i;
    }
    if (PyContext_Exit(ctx) < 0) {
        ok = -1;
    }
done:
    Py_XDECREF(vars);
    Py_XDECREF(ctx);
    return ok;
}

PyObject *
labels_init_type(void)
{
    if (labels_sets == NULL) {
        labels_sets = PyList_New(0);
        labels_ids = PyDict_New();
        labels_merged = PyDict_New();
        labels_var = PyContextVar_New("samprof.labels", NULL);
        if (labels_sets == NULL || labels_ids == NULL || labels_merged == NULL
            || labels_var == NULL) {
            return NULL;
        }
        labels_var_hash = labels_hamt_hash(labels_var);
        if (PyType_Ready(&labels_node_type) < 0) {
            return NULL;
        }
        /* The types come from the first walk, which may not use them
         * before it found them: the bitmap one first. */
        int bitmap = labels_check_walk(1);
        int array = bitmap == 1 ? labels_check_walk(24) : bitmap;
        if (bitmap < 0 || array < 0) {
            return NULL;
        }
        labels_walk_ok = bitmap == 1 && array == 1;
    }
    if (PyType_Ready(&labels_type) < 0) {
        return NULL;
    }
    Py_INCREF(&labels_type);
    return (PyObject *)&labels_type;
}
