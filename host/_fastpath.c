/*
 * dlcp.host._fastpath: the per-packet work of a DLCP endpoint, in C, without the GIL.
 *
 *   _fastpath_rx.c            receive: recvmmsg, placement into message buffers, control packets
 *   _fastpath_tx.c            send: headers from a template, GSO, sendmmsg, pacing
 *   _fastpath_drop_classes.c  drop classes of a message, as the policy's numpy reference
 *   _fastpath.h               what they share: the header layout from dlcp_constants.h
 *
 * HEADER_LAYOUT: the layout this build was compiled with, which host/fastpath.py compares
 * with dlcp.protocol's before it uses the module (a build older than the generated header
 * is not used).
 */
#include "_fastpath.h"

static PyMethodDef methods[] = {
    {"tx_send", tx_send, METH_VARARGS, "Send packets of one message: headers, GSO and sendmmsg in C."},
    {"drop_classes", drop_classes, METH_VARARGS, "Drop classes of one message (the policy's numpy reference, in C)."},
    {"runs_capacity", runs_capacity, METH_VARARGS, "Rows of (start, nbytes, seg_size) one slot may need."},
    {"rx_batch", rx_batch, METH_VARARGS, "One recvmmsg batch with the common case placed in C."},
    {"place_runs", place_runs, METH_VARARGS, "Runs rx_batch left, placed again against a rebuilt table."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT, .m_name = "_fastpath", .m_doc = "The DLCP data path in C.", .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__fastpath(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    /* (header bytes, invariant bytes, flags, priority, drop class, seq, offset, length, key start, key end,
     *  kind: offsets; LAST, FINAL: flags; DATA, PROBE, STOP: first header bytes) */
    PyObject *layout = Py_BuildValue("(iiiiiiiiiiiiiiii)", DLCP_HEADER_BYTES, DLCP_INVARIANT_BYTES, DLCP_OFF_FLAGS,
                                     DLCP_OFF_PRIORITY, DLCP_OFF_DROP_CLASS, DLCP_OFF_SEQ, DLCP_OFF_OFFSET,
                                     DLCP_OFF_LENGTH, FP_KEY_AT, FP_KEY_END, DLCP_OFF_KIND, DLCP_FLAG_LAST,
                                     DLCP_FLAG_FINAL, FP_VER_TYPE(DLCP_TYPE_DATA), FP_VER_TYPE(DLCP_TYPE_PROBE),
                                     FP_VER_TYPE(DLCP_TYPE_STOP));
    int failed = layout == NULL || PyModule_AddObjectRef(m, "HEADER_LAYOUT", layout) < 0 ||
                 PyModule_AddIntConstant(m, "MAX_SAMPLE", DC_MAX_SAMPLE) < 0;
    Py_XDECREF(layout);
    if (failed) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
