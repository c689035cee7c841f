/* The JSON text of a row's broker-log columns, natively: one job.

   `columns_text(spec, *values)` writes `,"name":value` for each column of
   `spec` (a tuple of (key text, is_float) pairs, the key text already
   `,"name":`) in order: an exact float as `float.__repr__` writes it (a
   zero as "0.0" or "-0.0"), an exact str of the plain printable ASCII
   characters (0x20-0x7e but the quote and the backslash) between quotes,
   None as null. Any other value (a NaN or infinity, a str that needs
   escapes, a float subclass, a value of another type, a str in a float
   column or a float in a str column) returns None: the caller's Python
   code writes that row, and decides as it always did (or raises).

   The texts of the floats are remembered by their bits (the broker log's
   times repeat: microseconds in ms). Built by tools/build_native.py beside
   the mypyc group; see kdissect/native.py for when a build is used. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define FLOAT_SLOTS 4096
#define FLOAT_TEXT 32

typedef struct {
    uint64_t bits;
    int length;  /* 0: empty slot */
    char text[FLOAT_TEXT];
} FloatText;

static FloatText float_texts[FLOAT_SLOTS];

/* the repr of a finite non-zero double into out (at most FLOAT_TEXT bytes): its length, or 0 */
static int float_text(double value, char *out) {
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    FloatText *slot = &float_texts[(bits ^ (bits >> 29) ^ (bits >> 47)) & (FLOAT_SLOTS - 1)];
    if (slot->length && slot->bits == bits) {
        memcpy(out, slot->text, slot->length);
        return slot->length;
    }
    /* what float.__repr__ calls */
    char *text = PyOS_double_to_string(value, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (text == NULL) {
        PyErr_Clear();
        return 0;
    }
    size_t length = strlen(text);
    if (length == 0 || length >= FLOAT_TEXT) {
        PyMem_Free(text);
        return 0;
    }
    memcpy(out, text, length);
    memcpy(slot->text, text, length);
    slot->bits = bits;
    slot->length = (int)length;
    PyMem_Free(text);
    return (int)length;
}

typedef struct {
    char *data;
    Py_ssize_t length, size;
} Text;

static int reserve(Text *t, Py_ssize_t more) {
    if (t->length + more <= t->size)
        return 1;
    Py_ssize_t size = (t->length + more) * 2;
    char *data = PyMem_Realloc(t->data, size);
    if (data == NULL)
        return 0;
    t->data = data;
    t->size = size;
    return 1;
}

static PyObject *columns_text(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || !PyTuple_CheckExact(args[0]) || PyTuple_GET_SIZE(args[0]) != nargs - 1) {
        PyErr_SetString(PyExc_TypeError, "columns_text(spec, *values): one value per column of spec");
        return NULL;
    }
    PyObject *spec = args[0];
    char stack[1024];
    Text t = {stack, 0, sizeof stack};
    int on_heap = 0;
    PyObject *result = NULL;
    for (Py_ssize_t i = 1; i < nargs; i++) {
        PyObject *column = PyTuple_GET_ITEM(spec, i - 1);
        if (!PyTuple_CheckExact(column) || PyTuple_GET_SIZE(column) != 2
            || !PyUnicode_IS_COMPACT_ASCII(PyTuple_GET_ITEM(column, 0))) {
            PyErr_SetString(PyExc_TypeError, "columns_text: spec holds (ASCII key text, is_float) pairs");
            goto done;
        }
        PyObject *key = PyTuple_GET_ITEM(column, 0);
        int is_float = PyObject_IsTrue(PyTuple_GET_ITEM(column, 1));
        if (is_float < 0)
            goto done;
        PyObject *value = args[i];
        Py_ssize_t key_length = PyUnicode_GET_LENGTH(key);
        Py_ssize_t value_length = value == Py_None ? 4
            : PyUnicode_CheckExact(value) ? PyUnicode_GET_LENGTH(value) + 2 : FLOAT_TEXT;
        if (t.length + key_length + value_length > t.size) {
            if (!on_heap) {
                char *data = PyMem_Malloc((t.length + key_length + value_length) * 2);
                if (data == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                memcpy(data, stack, t.length);
                t.data = data;
                t.size = (t.length + key_length + value_length) * 2;
                on_heap = 1;
            } else if (!reserve(&t, key_length + value_length)) {
                PyErr_NoMemory();
                goto done;
            }
        }
        memcpy(t.data + t.length, PyUnicode_DATA(key), key_length);
        t.length += key_length;
        if (value == Py_None) {
            memcpy(t.data + t.length, "null", 4);
            t.length += 4;
        } else if (is_float) {
            if (!PyFloat_CheckExact(value))
                goto decline;
            double x = PyFloat_AS_DOUBLE(value);
            if (x - x != 0)  /* (NaN or infinity) */
                goto decline;
            if (x == 0) {
                const char *zero = copysign(1.0, x) > 0 ? "0.0" : "-0.0";
                size_t n = strlen(zero);
                memcpy(t.data + t.length, zero, n);
                t.length += n;
            } else {
                int n = float_text(x, t.data + t.length);
                if (n == 0)
                    goto decline;
                t.length += n;
            }
        } else {
            if (!PyUnicode_CheckExact(value) || !PyUnicode_IS_COMPACT_ASCII(value))
                goto decline;
            const unsigned char *s = PyUnicode_DATA(value);
            Py_ssize_t n = PyUnicode_GET_LENGTH(value);
            for (Py_ssize_t k = 0; k < n; k++)
                if (s[k] < 0x20 || s[k] > 0x7e || s[k] == '"' || s[k] == '\\')
                    goto decline;
            t.data[t.length++] = '"';
            memcpy(t.data + t.length, s, n);
            t.length += n;
            t.data[t.length++] = '"';
        }
    }
    result = PyUnicode_New(t.length, 127);
    if (result != NULL)
        memcpy(PyUnicode_DATA(result), t.data, t.length);
    goto done;
decline:
    result = Py_None;
    Py_INCREF(result);
done:
    if (on_heap)
        PyMem_Free(t.data);
    return result;
}

static PyMethodDef module_methods[] = {
    {"columns_text", (PyCFunction)(void (*)(void))columns_text, METH_FASTCALL,
     "columns_text(spec, *values) -> the columns' JSON text (',\"name\":value' each), or None when a value "
     "is not one of the plain cases (the caller's Python code writes it)."},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_native_text",
    "The JSON text of a row's broker-log columns, natively (see the C source's head).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native_text(void) { return PyModule_Create(&module_def); }
