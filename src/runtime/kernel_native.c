/* kernel_native — `_cellbox_native`, a built-in module of cellbox-kernel for the kernel's own
 * per-cell work that is too slow in Python.
 *
 * murmur2_x86(code, seed): the hash in every cell's file name (/tmp/ipykernel_<pid>/<hash>.py,
 * ipykernel's naming, compiler.py). ipykernel computes it in Python, ~0.15 µs per byte: a
 * 2 KB cell paid ~300 µs before it ran. The same function in C, bit for bit (tests compare it
 * with ipykernel's own on random text).
 *
 * checkpoint_point(channel_fd): the kernel stops at its checkpoint point (checkpoint_point.h);
 * returns ("refused", why), ("goes_on", frame the daemon sent meanwhile or "") or ("restored",
 * report as JSON text) in a restored copy. */
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/checkpoint_point.h"
#include "runtime/kernel_runtime.h"

#define MURMUR_M 0x5BD1E995u

static uint32_t murmur2_x86(const unsigned char *data, size_t length, uint32_t seed)
{
    /* ipykernel hashes len(data) as a Python int: only its low 32 bits reach the XOR. */
    uint32_t h = seed ^ (uint32_t)length;
    size_t rounded_end = length & ~(size_t)3;
    for (size_t i = 0; i < rounded_end; i += 4) {
        uint32_t k = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 | (uint32_t)data[i + 2] << 16 |
                     (uint32_t)data[i + 3] << 24;
        k *= MURMUR_M;
        k ^= k >> 24;
        k *= MURMUR_M;
        h *= MURMUR_M;
        h ^= k;
    }
    size_t tail = length & 3;
    if (tail) {
        uint32_t k = 0;
        for (size_t i = 0; i < tail; i++)
            k |= (uint32_t)data[rounded_end + i] << (8 * i);
        h ^= k;
        h *= MURMUR_M;
    }
    h ^= h >> 13;
    h *= MURMUR_M;
    h ^= h >> 15;
    return h;
}

static PyObject *native_murmur2_x86(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *text;
    unsigned long seed;
    if (!PyArg_ParseTuple(args, "Uk:murmur2_x86", &text, &seed))
        return NULL;
    Py_ssize_t length;
    /* As str.encode("utf8"): a lone surrogate raises UnicodeEncodeError here too. */
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &length);
    if (!utf8)
        return NULL;
    return PyLong_FromUnsignedLong(murmur2_x86((const unsigned char *)utf8, (size_t)length, (uint32_t)seed));
}

static PyObject *native_checkpoint_point(PyObject *self, PyObject *args)
{
    (void)self;
    int channel_fd;
    if (!PyArg_ParseTuple(args, "i:checkpoint_point", &channel_fd))
        return NULL;
    char *text = NULL;
    checkpoint_outcome outcome = checkpoint_point(channel_fd, &text);
    static const char *const names[] = {"refused", "goes_on", "restored"};
    PyObject *result = Py_BuildValue("(ss)", names[outcome], text ? text : "");
    free(text);
    return result;
}

static PyMethodDef native_methods[] = {
    {"checkpoint_point", native_checkpoint_point, METH_VARARGS,
     "checkpoint_point(channel_fd) -> (outcome, text): stop here to be imaged (checkpoint_point.h)."},
    {"murmur2_x86", native_murmur2_x86, METH_VARARGS,
     "murmur2_x86(text, seed) -> int: ipykernel's cell-name hash of text's UTF-8 bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_cellbox_native", "cellbox-kernel's own C helpers.", -1, native_methods,
    NULL, NULL, NULL, NULL,
};

static PyObject *native_init(void) { return PyModule_Create(&native_module); }

int kernel_native_register(void) { return PyImport_AppendInittab("_cellbox_native", native_init); }
