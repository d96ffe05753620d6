/* labels: the samprof.labels type and the label-set registry.
 *
 * Everything here runs with the GIL held, which protects the registry and
 * the merge cache. Ids are never reused: a sample's id means the same
 * labels forever. */
#include "labels.h"

#include <stdint.h>

#include "tctx.h"

/* Nesting depth kept inline per object; deeper re-entry of the same object
 * spills to a list. */
#define LABELS_INLINE_DEPTH 4

typedef struct {
    PyObject_HEAD
    PyObject *pairs; /* tuple of (key, value) in call order */
    uint32_t saved[LABELS_INLINE_DEPTH]; /* outer ids, innermost last */
    int depth;                           /* entries currently active */
    PyObject *overflow;  /* list of outer ids beyond LABELS_INLINE_DEPTH */
    uint32_t last_outer; /* one-entry merge cache: outer id ... */
    uint32_t last_id;    /* ... and the merged id (0 = empty cache) */
} labels_object;

/* Registered label sets, id = index + 1. GIL. */
static PyObject *labels_sets;
/* PyLong of each id (index = id), so setting a thread's id allocates
 * nothing. GIL. */
static PyObject *labels_id_objects;
/* Sorted pairs tuple -> id, so equal sets share an id. GIL. */
static PyObject *labels_ids;
/* (outer id, block pairs) -> merged id. GIL. */
static PyObject *labels_merged;
static PyObject *labels_key;

PyObject *
labels_registry(void)
{
    return labels_sets;
}

PyObject *
labels_dict_key(void)
{
    return labels_key;
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
    if (id == NULL || PyDict_SetItem(labels_ids, pairs, id) < 0
        || PyList_Append(labels_id_objects, id) < 0) {
        Py_XDECREF(id);
        return 0;
    }
    Py_DECREF(id);
    return (uint32_t)n;
}

int
labels_set_current(uint32_t id)
{
    tctx_set_labels(id);
    PyObject *dict = PyThreadState_GetDict();
    if (dict == NULL) {
        return 0; /* no thread state dict: only TLS carries it */
    }
    return PyDict_SetItem(dict, labels_key,
                          PyList_GET_ITEM(labels_id_objects, id));
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
    Py_XDECREF(self->overflow);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
labels_enter(labels_object *self, PyObject *noargs)
{
    (void)noargs;
    uint32_t outer = tctx_labels();
    uint32_t id;
    if (self->last_id != 0 && self->last_outer == outer) {
        id = self->last_id;
        goto found;
    }
    PyObject *key = Py_BuildValue("(IO)", outer, self->pairs);
    if (key == NULL) {
        return NULL;
    }
    PyObject *cached = PyDict_GetItemWithError(labels_merged, key);
    if (cached != NULL) {
        id = (uint32_t)PyLong_AsUnsignedLong(cached);
    }
    else {
        if (PyErr_Occurred() || (id = labels_merge(outer, self->pairs)) == 0) {
            Py_DECREF(key);
            return NULL;
        }
        PyObject *v = PyLong_FromUnsignedLong(id);
        if (v == NULL || PyDict_SetItem(labels_merged, key, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(key);
            return NULL;
        }
        Py_DECREF(v);
    }
    Py_DECREF(key);
    self->last_outer = outer;
    self->last_id = id;
found:
    if (self->depth < LABELS_INLINE_DEPTH) {
        self->saved[self->depth] = outer;
    }
    else {
        if (self->overflow == NULL
            && (self->overflow = PyList_New(0)) == NULL) {
            return NULL;
        }
        PyObject *v = PyLong_FromUnsignedLong(outer);
        if (v == NULL || PyList_Append(self->overflow, v) < 0) {
            Py_XDECREF(v);
            return NULL;
        }
        Py_DECREF(v);
    }
    self->depth++;
    if (labels_set_current(id) < 0) {
        return NULL;
    }
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *
labels_exit(labels_object *self, PyObject *args)
{
    (void)args;
    if (self->depth == 0) {
        PyErr_SetString(PyExc_RuntimeError, "labels block exited more "
                                            "often than entered");
        return NULL;
    }
    uint32_t outer;
    self->depth--;
    if (self->depth < LABELS_INLINE_DEPTH) {
        outer = self->saved[self->depth];
    }
    else {
        Py_ssize_t n = PyList_GET_SIZE(self->overflow);
        outer = (uint32_t)PyLong_AsUnsignedLong(
            PyList_GET_ITEM(self->overflow, n - 1));
        if (PyList_SetSlice(self->overflow, n - 1, n, NULL) < 0) {
            return NULL;
        }
    }
    if (labels_set_current(outer) < 0) {
        return NULL;
    }
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

PyObject *
labels_init_type(void)
{
    if (labels_sets == NULL) {
        labels_sets = PyList_New(0);
        labels_ids = PyDict_New();
        labels_merged = PyDict_New();
        labels_key = PyUnicode_InternFromString("samprof.labels");
        /* Item 0 is the id of "no labels". */
        labels_id_objects = Py_BuildValue("[i]", 0);
        if (labels_sets == NULL || labels_ids == NULL || labels_merged == NULL
            || labels_key == NULL || labels_id_objects == NULL) {
            return NULL;
        }
    }
    if (PyType_Ready(&labels_type) < 0) {
        return NULL;
    }
    Py_INCREF(&labels_type);
    return (PyObject *)&labels_type;
}
