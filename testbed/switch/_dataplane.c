/* dlcp.testbed.switch._dataplane: the Python face of the C software switch (switch.h).
 *
 * Thin: argument conversion, the lock around each control-plane call, and the GIL released
 * wherever C may wait (the lock, the data-plane thread's join, the benchmark sender).
 * dlcp.testbed.switch.dataplane wraps it in the TableBackend interface.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <unistd.h>

#include "switch.h"

typedef struct {
    PyObject_HEAD dp_switch *sw;
} SwitchObject;

static void lock(dp_switch *s) {
    if (pthread_mutex_trylock(&s->lock) == 0) return;
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&s->lock);
    Py_END_ALLOW_THREADS
}
static void unlock(dp_switch *s) { pthread_mutex_unlock(&s->lock); }

static int Switch_init(SwitchObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"max_frame", "virtual_clock", NULL};
    unsigned int max_frame = 16384;
    int virtual_clock = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Ip", kwlist, &max_frame, &virtual_clock)) return -1;
    if (max_frame < 64 || max_frame > (1u << 20)) {
        PyErr_Format(PyExc_ValueError, "max_frame %u out of range 64..%u", max_frame, 1u << 20);
        return -1;
    }
    if (self->sw != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "already initialised");
        return -1;
    }
    self->sw = dp_switch_new(max_frame, virtual_clock);
    if (self->sw == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void Switch_dealloc(SwitchObject *self) {
    if (self->sw != NULL) {
        Py_BEGIN_ALLOW_THREADS dp_switch_free(self->sw);
        Py_END_ALLOW_THREADS self->sw = NULL;
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *errno_error(int rc, const char *msg) {
    errno = -rc;
    PyObject *exc = (rc == -EINVAL || rc == -EEXIST) ? PyExc_ValueError : PyExc_OSError;
    if (exc == PyExc_OSError) {
        PyObject *v = Py_BuildValue("(is)", -rc, msg);
        if (v != NULL) {
            PyErr_SetObject(PyExc_OSError, v);
            Py_DECREF(v);
        }
        return NULL;
    }
    PyErr_SetString(exc, msg);
    return NULL;
}

static PyObject *Switch_add_port(SwitchObject *self, PyObject *args) {
    unsigned int port, block_size, block_nr, block_timeout_ms = 1;
    const char *ifname;
    unsigned long long buffer;
    if (!PyArg_ParseTuple(args, "IzKII|I", &port, &ifname, &buffer, &block_size, &block_nr, &block_timeout_ms))
        return NULL;
    char err[256] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = dp_switch_add_port(self->sw, (uint16_t)(port > 0xFFFF ? 0xFFFF : port), ifname,
                                                   buffer, block_size, block_nr, block_timeout_ms, err,
                                                   sizeof(err));
    Py_END_ALLOW_THREADS if (rc < 0) return errno_error(rc, err);
    Py_RETURN_NONE;
}

/* The port, with the switch's lock held (close() frees ports under it); NULL, unlocked, with
 * ValueError set when there is none. */
static dp_port *lock_port(SwitchObject *self, unsigned int port) {
    lock(self->sw);
    if (port >= DP_NUM_PORTS || self->sw->ports[port] == NULL) {
        unlock(self->sw);
        PyErr_Format(PyExc_ValueError, "no port %u", port);
        return NULL;
    }
    return self->sw->ports[port];
}

static PyObject *Switch_set_port(SwitchObject *self, PyObject *args) {
    /* (port, rate_bps, burst_bytes, delay_ns, loss thresholds (8), seed, paused mask) */
    unsigned int port, paused;
    unsigned long long rate, burst, delay, seed;
    PyObject *loss;
    if (!PyArg_ParseTuple(args, "IKKKOKI", &port, &rate, &burst, &delay, &loss, &seed, &paused)) return NULL;
    uint64_t thr[DP_NUM_QUEUES];
    PyObject *seq = PySequence_Fast(loss, "loss must be a sequence");
    if (seq == NULL) return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != DP_NUM_QUEUES) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "loss needs %d thresholds", DP_NUM_QUEUES);
        return NULL;
    }
    for (int i = 0; i < DP_NUM_QUEUES; i++) {
        thr[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    dp_port *p = lock_port(self, port);
    if (p == NULL) return NULL;
    dp_egress *e = &p->egress;
    dp_egress_set_shaper(e, rate, burst, dp_switch_now(self->sw));
    e->delay_ns = delay;
    memcpy(e->loss, thr, sizeof(thr));
    if (seed != 0) e->rng = seed;
    e->paused = (uint8_t)paused;
    unlock(self->sw);
    Py_RETURN_NONE;
}

static PyObject *Switch_set_paused(SwitchObject *self, PyObject *args) {
    unsigned int port, paused;
    if (!PyArg_ParseTuple(args, "II", &port, &paused)) return NULL;
    dp_port *p = lock_port(self, port);
    if (p == NULL) return NULL;
    p->egress.paused = (uint8_t)paused;
    unlock(self->sw);
    uint64_t one = 1;
    ssize_t rr = write(self->sw->wake_fd, &one, sizeof(one));
    (void)rr;
    Py_RETURN_NONE;
}

static PyObject *Switch_set_plain_peer(SwitchObject *self, PyObject *args) {
    unsigned int port;
    int peer;
    if (!PyArg_ParseTuple(args, "Ii", &port, &peer)) return NULL;
    dp_port *p = lock_port(self, port);
    if (p == NULL) return NULL;
    if (peer >= 0 && (peer >= DP_NUM_PORTS || self->sw->ports[peer] == NULL)) {
        unlock(self->sw);
        return PyErr_Format(PyExc_ValueError, "no port %d", peer);
    }
    p->plain_peer = peer;
    unlock(self->sw);
    Py_RETURN_NONE;
}

static PyObject *Switch_start(SwitchObject *self, PyObject *Py_UNUSED(ignored)) {
    char err[256] = "";
    int rc;
    /* dp_switch_start() takes the lock: never wait for it holding the GIL (a thread that got the
     * lock in lock() may be waiting for the GIL) */
    Py_BEGIN_ALLOW_THREADS rc = dp_switch_start(self->sw, err, sizeof(err));
    Py_END_ALLOW_THREADS if (rc < 0) return errno_error(rc, err);
    Py_RETURN_NONE;
}

static PyObject *Switch_stop(SwitchObject *self, PyObject *Py_UNUSED(ignored)) {
    Py_BEGIN_ALLOW_THREADS dp_switch_stop(self->sw);
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyObject *Switch_close(SwitchObject *self, PyObject *Py_UNUSED(ignored)) {
    Py_BEGIN_ALLOW_THREADS dp_switch_close(self->sw);
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyObject *Switch_reset_timing(SwitchObject *self, PyObject *Py_UNUSED(ignored)) {
    lock(self->sw);
    self->sw->first_rx_ns = self->sw->last_tx_ns = 0;
    self->sw->first_rx_cpu_ns = self->sw->last_tx_cpu_ns = 0;
    unlock(self->sw);
    Py_RETURN_NONE;
}

static PyObject *Switch_running(SwitchObject *self, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(self->sw->running);
}

/* ---- tables: each returns a DP_E_* code ---- */

#define LOCKED(call)                                                                                            \
    do {                                                                                                        \
        lock(self->sw);                                                                                         \
        int rc_ = (call);                                                                                       \
        unlock(self->sw);                                                                                       \
        return PyLong_FromLong(rc_);                                                                            \
    } while (0)

static PyObject *Switch_route(SwitchObject *self, PyObject *args) {
    int op, plen, action;
    unsigned int prefix, group;
    if (!PyArg_ParseTuple(args, "iIiiI", &op, &prefix, &plen, &action, &group)) return NULL;
    dp_tables *t = self->sw->tables;
    if (op == DP_OP_INSERT) LOCKED(dp_route_insert(t, prefix, plen, action, (uint16_t)group));
    if (op == DP_OP_MODIFY) LOCKED(dp_route_modify(t, prefix, plen, action, (uint16_t)group));
    LOCKED(dp_route_delete(t, prefix, plen));
}

static PyObject *Switch_route_default(SwitchObject *self, PyObject *args) {
    int action;
    unsigned int group;
    if (!PyArg_ParseTuple(args, "iI", &action, &group)) return NULL;
    LOCKED(dp_route_default(self->sw->tables, action, (uint16_t)group));
}

static PyObject *Switch_member(SwitchObject *self, PyObject *args) {
    int index, action;
    unsigned int port;
    Py_buffer smac, dmac;
    if (!PyArg_ParseTuple(args, "iiIy*y*", &index, &action, &port, &smac, &dmac)) return NULL;
    int rc = DP_E_INVALID;
    if (smac.len == 6 && dmac.len == 6 && port < DP_NUM_PORTS) {
        lock(self->sw);
        rc = dp_member_set(self->sw->tables, index, action, (uint16_t)port, smac.buf, dmac.buf);
        unlock(self->sw);
    }
    PyBuffer_Release(&smac);
    PyBuffer_Release(&dmac);
    return PyLong_FromLong(rc);
}

static PyObject *Switch_member_clear(SwitchObject *self, PyObject *args) {
    int index;
    if (!PyArg_ParseTuple(args, "i", &index)) return NULL;
    LOCKED(dp_member_clear(self->sw->tables, index));
}

static PyObject *Switch_group(SwitchObject *self, PyObject *args) {
    int index;
    PyObject *members;
    if (!PyArg_ParseTuple(args, "iO", &index, &members)) return NULL;
    PyObject *seq = PySequence_Fast(members, "members must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > DP_MAX_GROUP_SLOTS) {
        Py_DECREF(seq);
        return PyLong_FromLong(DP_E_FULL);
    }
    uint16_t slots[DP_MAX_GROUP_SLOTS];
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return NULL;
        }
        if (v < 0 || v >= DP_MAX_MEMBERS) {
            Py_DECREF(seq);
            return PyLong_FromLong(DP_E_INVALID);
        }
        slots[i] = (uint16_t)v;
    }
    Py_DECREF(seq);
    LOCKED(dp_group_set(self->sw->tables, index, slots, (int)n));
}

static PyObject *Switch_group_clear(SwitchObject *self, PyObject *args) {
    int index;
    if (!PyArg_ParseTuple(args, "i", &index)) return NULL;
    LOCKED(dp_group_clear(self->sw->tables, index));
}

static PyObject *Switch_next_hop(SwitchObject *self, PyObject *args) {
    int op, kind;
    unsigned int group, ref;
    if (!PyArg_ParseTuple(args, "iIiI", &op, &group, &kind, &ref)) return NULL;
    if (group > 0xFFFF || ref > 0xFFFF) return PyLong_FromLong(DP_E_INVALID);
    if (op == DP_OP_DELETE) LOCKED(dp_next_hop_delete(self->sw->tables, (uint16_t)group));
    LOCKED(dp_next_hop_set(self->sw->tables, (uint16_t)group, kind, (uint16_t)ref, op == DP_OP_INSERT));
}

static PyObject *Switch_dlcp_port(SwitchObject *self, PyObject *args) {
    int present;
    unsigned int port;
    if (!PyArg_ParseTuple(args, "Ip", &port, &present)) return NULL;
    if (port > 0xFFFF) return PyLong_FromLong(DP_E_INVALID);
    LOCKED(dp_dlcp_port_set(self->sw->tables, (uint16_t)port, present));
}

static PyObject *Switch_dlcp_port_default(SwitchObject *self, PyObject *args) {
    int mark;
    if (!PyArg_ParseTuple(args, "p", &mark)) return NULL;
    lock(self->sw);
    dp_dlcp_port_default(self->sw->tables, mark);
    unlock(self->sw);
    return PyLong_FromLong(DP_E_OK);
}

static PyObject *Switch_dlcp_class(SwitchObject *self, PyObject *args) {
    int op, priority, action, queue;
    unsigned long long value, mask;
    if (!PyArg_ParseTuple(args, "iKKiii", &op, &value, &mask, &priority, &action, &queue)) return NULL;
    LOCKED(dp_class_write(self->sw->tables, op, value, mask, priority, action, queue));
}

static PyObject *Switch_class_default(SwitchObject *self, PyObject *args) {
    int action, queue;
    if (!PyArg_ParseTuple(args, "ii", &action, &queue)) return NULL;
    LOCKED(dp_class_default(self->sw->tables, action, queue));
}

static PyObject *Switch_threshold(SwitchObject *self, PyObject *args) {
    int op, queue, drop_class, action;
    unsigned int threshold;
    if (!PyArg_ParseTuple(args, "iiiiI", &op, &queue, &drop_class, &action, &threshold)) return NULL;
    LOCKED(dp_threshold_write(self->sw->tables, op, queue, drop_class, action, threshold));
}

static PyObject *Switch_threshold_default(SwitchObject *self, PyObject *args) {
    int action;
    unsigned int threshold;
    if (!PyArg_ParseTuple(args, "iI", &action, &threshold)) return NULL;
    LOCKED(dp_threshold_default(self->sw->tables, action, threshold));
}

static PyObject *Switch_reset_tables(SwitchObject *self, PyObject *Py_UNUSED(ignored)) {
    lock(self->sw);
    dp_tables_init(self->sw->tables);
    unlock(self->sw);
    Py_RETURN_NONE;
}

/* ---- counters ---- */

static PyObject *Switch_counter(SwitchObject *self, PyObject *args) {
    int which;
    if (!PyArg_ParseTuple(args, "i", &which)) return NULL;
    if (which < 0 || which >= DP_NUM_COUNTERS) return PyErr_Format(PyExc_ValueError, "no counter %d", which);
    PyObject *pk = PyBytes_FromStringAndSize(NULL, sizeof(uint64_t) * PORT_CLASS_SLOTS);
    PyObject *by = PyBytes_FromStringAndSize(NULL, sizeof(uint64_t) * PORT_CLASS_SLOTS);
    if (pk == NULL || by == NULL) {
        Py_XDECREF(pk);
        Py_XDECREF(by);
        return NULL;
    }
    lock(self->sw);
    memcpy(PyBytes_AS_STRING(pk), self->sw->tables->counters[which].packets, sizeof(uint64_t) * PORT_CLASS_SLOTS);
    memcpy(PyBytes_AS_STRING(by), self->sw->tables->counters[which].bytes, sizeof(uint64_t) * PORT_CLASS_SLOTS);
    unlock(self->sw);
    return Py_BuildValue("(NN)", pk, by);
}

static PyObject *Switch_counter_cell(SwitchObject *self, PyObject *args) {
    int which;
    unsigned int index;
    if (!PyArg_ParseTuple(args, "iI", &which, &index)) return NULL;
    if (which < 0 || which >= DP_NUM_COUNTERS || index >= PORT_CLASS_SLOTS)
        return PyErr_Format(PyExc_ValueError, "no counter cell %d[%u]", which, index);
    lock(self->sw);
    unsigned long long p = self->sw->tables->counters[which].packets[index];
    unsigned long long b = self->sw->tables->counters[which].bytes[index];
    unlock(self->sw);
    return Py_BuildValue("(KK)", p, b);
}

static PyObject *Switch_counter_write(SwitchObject *self, PyObject *args) {
    int which;
    unsigned int index;
    unsigned long long p, b;
    if (!PyArg_ParseTuple(args, "iIKK", &which, &index, &p, &b)) return NULL;
    if (which < 0 || which >= DP_NUM_COUNTERS || index >= PORT_CLASS_SLOTS)
        return PyErr_Format(PyExc_ValueError, "no counter cell %d[%u]", which, index);
    lock(self->sw);
    self->sw->tables->counters[which].packets[index] = p;
    self->sw->tables->counters[which].bytes[index] = b;
    unlock(self->sw);
    Py_RETURN_NONE;
}

/* ---- statistics ---- */

static PyObject *reasons_dict(const uint64_t *v) {
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    for (int r = 1; r < DP_NUM_REASONS; r++) {
        if (v[r] == 0) continue;
        PyObject *x = PyLong_FromUnsignedLongLong(v[r]);
        if (x == NULL || PyDict_SetItemString(d, dp_reason_name(r), x) < 0) {
            Py_XDECREF(x);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(x);
    }
    return d;
}

static PyObject *Switch_stats(SwitchObject *self, PyObject *Py_UNUSED(ignored)) {
    dp_switch *s = self->sw;
    int n = s->n_ports;
    dp_port_stats *copy = malloc(sizeof(dp_port_stats) * (size_t)(n > 0 ? n : 1));
    uint64_t *extra = malloc(sizeof(uint64_t) * 5 * (size_t)(n > 0 ? n : 1));
    uint16_t ids[DP_NUM_PORTS];
    if (copy == NULL || extra == NULL) {
        free(copy);
        free(extra);
        return PyErr_NoMemory();
    }
    lock(s);
    for (int i = 0; i < n; i++) {
        dp_port *p = s->ports[s->port_ids[i]];
        ids[i] = s->port_ids[i];
        copy[i] = p->egress.stats;
        extra[5 * i] = p->ring_drops;
        extra[5 * i + 1] = p->egress.queued;
        extra[5 * i + 2] = p->egress.inflight;
        extra[5 * i + 3] = p->tx_calls;
        extra[5 * i + 4] = p->rx_blocks;
    }
    uint64_t rounds = s->rounds, waits = s->idle_waits, first = s->first_rx_ns, last = s->last_tx_ns;
    uint64_t first_cpu = s->first_rx_cpu_ns, last_cpu = s->last_tx_cpu_ns;
    uint64_t late = s->late_frames, late_max = s->late_ns_max, untimed = s->untimed_frames;
    int tid = s->thread_id;
    unlock(s);
    PyObject *ports = PyDict_New();
    for (int i = 0; ports != NULL && i < n; i++) {
        dp_port_stats *st = &copy[i];
        PyObject *classes = PyList_New(DP_NUM_QUEUES);
        for (int q = 0; classes != NULL && q < DP_NUM_QUEUES; q++) {
            dp_class_stats *c = &st->cls[q];
            PyObject *cd = Py_BuildValue(
                "{sKsKsKsKsKsNsIsIsKsK}", "enqueued", (unsigned long long)c->enqueued, "enqueued_bytes",
                (unsigned long long)c->enqueued_bytes, "sent", (unsigned long long)c->sent, "sent_bytes",
                (unsigned long long)c->sent_bytes, "trimmed", (unsigned long long)c->trimmed, "dropped",
                reasons_dict(c->dropped), "depth", c->depth, "depth_hwm", c->depth_hwm, "depth_bytes",
                (unsigned long long)c->depth_bytes, "depth_bytes_hwm", (unsigned long long)c->depth_bytes_hwm);
            if (cd == NULL) {
                Py_CLEAR(classes);
                break;
            }
            PyList_SET_ITEM(classes, q, cd);
        }
        PyObject *pd = classes == NULL ? NULL
                                       : Py_BuildValue("{sKsKsNsKsKsKsKsKsKsN}", "rx", (unsigned long long)st->rx,
                                                       "rx_bytes", (unsigned long long)st->rx_bytes, "rx_dropped",
                                                       reasons_dict(st->rx_dropped), "buffer_hwm",
                                                       (unsigned long long)st->buffer_hwm, "ring_dropped",
                                                       (unsigned long long)extra[5 * i], "queued_bytes",
                                                       (unsigned long long)extra[5 * i + 1], "inflight_bytes",
                                                       (unsigned long long)extra[5 * i + 2], "tx_calls",
                                                       (unsigned long long)extra[5 * i + 3], "rx_blocks",
                                                       (unsigned long long)extra[5 * i + 4], "classes", classes);
        PyObject *key = PyLong_FromLong(ids[i]);
        if (pd == NULL || key == NULL || PyDict_SetItem(ports, key, pd) < 0) {
            Py_XDECREF(pd);
            Py_XDECREF(key);
            Py_CLEAR(ports);
            break;
        }
        Py_DECREF(pd);
        Py_DECREF(key);
    }
    free(copy);
    free(extra);
    if (ports == NULL) return NULL;
    return Py_BuildValue("{sNsKsKsKsKsKsKsKsKsKsi}", "ports", ports, "rounds", (unsigned long long)rounds,
                         "idle_waits", (unsigned long long)waits, "first_rx_ns", (unsigned long long)first,
                         "last_tx_ns", (unsigned long long)last, "first_rx_cpu_ns", (unsigned long long)first_cpu,
                         "last_tx_cpu_ns", (unsigned long long)last_cpu, "late_frames", (unsigned long long)late,
                         "late_ns_max", (unsigned long long)late_max, "untimed_frames", (unsigned long long)untimed,
                         "thread_id", tid);
}

/* ---- virtual ports ---- */

static PyObject *Switch_inject(SwitchObject *self, PyObject *args) {
    unsigned int port;
    Py_buffer frame;
    if (!PyArg_ParseTuple(args, "Iy*", &port, &frame)) return NULL;
    if (frame.len > 0xFFFFFFFF) {
        PyBuffer_Release(&frame);
        return PyErr_Format(PyExc_ValueError, "frame too long");
    }
    dp_verdict v;
    lock(self->sw);
    if (port >= DP_NUM_PORTS || self->sw->ports[port] == NULL || self->sw->ports[port]->fd >= 0) {
        unlock(self->sw);
        PyBuffer_Release(&frame);
        return PyErr_Format(PyExc_ValueError, "port %u is not a virtual port", port);
    }
    dp_switch_inject(self->sw, (uint16_t)port, frame.buf, (uint32_t)frame.len, &v);
    unlock(self->sw);
    PyBuffer_Release(&frame);
    return Py_BuildValue("(isiiiI)", v.drop, dp_reason_name(v.reason), v.port, v.queue, v.trimmed, v.len);
}

static PyObject *Switch_set_time(SwitchObject *self, PyObject *args) {
    unsigned long long ns;
    if (!PyArg_ParseTuple(args, "K", &ns)) return NULL;
    if (!self->sw->virtual_clock) return PyErr_Format(PyExc_ValueError, "the switch runs on the real clock");
    lock(self->sw);
    self->sw->now_ns = ns;
    unlock(self->sw);
    Py_RETURN_NONE;
}

static PyObject *Switch_now(SwitchObject *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromUnsignedLongLong(dp_switch_now(self->sw));
}

static void drain_out(void *ctx, uint16_t port, const uint8_t *data, uint32_t len) {
    PyObject *list = ctx;
    PyObject *item = Py_BuildValue("(iy#)", (int)port, (const char *)data, (Py_ssize_t)len);
    if (item != NULL) {
        PyList_Append(list, item);
        Py_DECREF(item);
    }
}

static PyObject *Switch_drain(SwitchObject *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *list = PyList_New(0);
    if (list == NULL) return NULL;
    lock(self->sw);
    dp_switch_drain(self->sw, drain_out, list);
    unlock(self->sw);
    if (PyErr_Occurred()) {
        Py_DECREF(list);
        return NULL;
    }
    return list;
}

static PyMethodDef Switch_methods[] = {
    {"add_port", (PyCFunction)Switch_add_port, METH_VARARGS,
     "add_port(port, ifname | None, buffer, block_size, block_nr[, block_timeout_ms])"},
    {"set_port", (PyCFunction)Switch_set_port, METH_VARARGS,
     "set_port(port, rate_bps, burst_bytes, delay_ns, loss[8], seed, paused_mask)"},
    {"set_paused", (PyCFunction)Switch_set_paused, METH_VARARGS, "set_paused(port, mask)"},
    {"set_plain_peer", (PyCFunction)Switch_set_plain_peer, METH_VARARGS, "set_plain_peer(port, peer | -1)"},
    {"start", (PyCFunction)Switch_start, METH_NOARGS, "start the data-plane thread"},
    {"stop", (PyCFunction)Switch_stop, METH_NOARGS, "stop the data-plane thread"},
    {"close", (PyCFunction)Switch_close, METH_NOARGS, "stop the thread and close every port now"},
    {"running", (PyCFunction)Switch_running, METH_NOARGS, "whether the thread runs"},
    {"reset_timing", (PyCFunction)Switch_reset_timing, METH_NOARGS, "forget first_rx_ns and last_tx_ns"},
    {"route", (PyCFunction)Switch_route, METH_VARARGS, "route(op, prefix, plen, action, group) -> code"},
    {"route_default", (PyCFunction)Switch_route_default, METH_VARARGS, "route_default(action, group)"},
    {"member", (PyCFunction)Switch_member, METH_VARARGS, "member(index, action, port, smac, dmac)"},
    {"member_clear", (PyCFunction)Switch_member_clear, METH_VARARGS, "member_clear(index)"},
    {"group", (PyCFunction)Switch_group, METH_VARARGS, "group(index, member indices)"},
    {"group_clear", (PyCFunction)Switch_group_clear, METH_VARARGS, "group_clear(index)"},
    {"next_hop", (PyCFunction)Switch_next_hop, METH_VARARGS, "next_hop(op, group, kind, ref)"},
    {"dlcp_port", (PyCFunction)Switch_dlcp_port, METH_VARARGS, "dlcp_port(port, present)"},
    {"dlcp_port_default", (PyCFunction)Switch_dlcp_port_default, METH_VARARGS, "dlcp_port_default(mark)"},
    {"dlcp_class", (PyCFunction)Switch_dlcp_class, METH_VARARGS,
     "dlcp_class(op, value, mask, priority, action, queue)"},
    {"class_default", (PyCFunction)Switch_class_default, METH_VARARGS, "class_default(action, queue)"},
    {"threshold", (PyCFunction)Switch_threshold, METH_VARARGS,
     "threshold(op, queue, drop_class, action, threshold)"},
    {"threshold_default", (PyCFunction)Switch_threshold_default, METH_VARARGS,
     "threshold_default(action, threshold)"},
    {"reset_tables", (PyCFunction)Switch_reset_tables, METH_NOARGS, "empty every table and counter"},
    {"counter", (PyCFunction)Switch_counter, METH_VARARGS, "counter(which) -> (packets u64[], bytes u64[])"},
    {"counter_cell", (PyCFunction)Switch_counter_cell, METH_VARARGS, "counter_cell(which, index)"},
    {"counter_write", (PyCFunction)Switch_counter_write, METH_VARARGS,
     "counter_write(which, index, packets, bytes)"},
    {"stats", (PyCFunction)Switch_stats, METH_NOARGS, "per-port statistics"},
    {"inject", (PyCFunction)Switch_inject, METH_VARARGS, "inject(port, frame) -> verdict (virtual ports)"},
    {"set_time", (PyCFunction)Switch_set_time, METH_VARARGS, "set_time(ns) (virtual clock)"},
    {"now", (PyCFunction)Switch_now, METH_NOARGS, "the switch clock in ns"},
    {"drain", (PyCFunction)Switch_drain, METH_NOARGS, "frames sent by virtual ports: [(port, bytes)]"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SwitchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dlcp.testbed.switch._dataplane.Switch",
    .tp_basicsize = sizeof(SwitchObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The C software switch (testbed/switch/switch.h).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Switch_init,
    .tp_dealloc = (destructor)Switch_dealloc,
    .tp_methods = Switch_methods,
};

/* ---- module functions ---- */

static PyObject *mod_blast(PyObject *Py_UNUSED(m), PyObject *args) {
    const char *ifname;
    PyObject *frames;
    unsigned long long count;
    double seconds;
    unsigned int batch;
    if (!PyArg_ParseTuple(args, "sOKdI", &ifname, &frames, &count, &seconds, &batch)) return NULL;
    /* A tuple of our own: the frames are sent without the GIL, and a list could be emptied meanwhile by
     * another thread, freeing the bytes objects the pointers below point into. */
    PyObject *seq = PySequence_Tuple(frames);
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const uint8_t **ptrs = calloc((size_t)(n > 0 ? n : 1), sizeof(*ptrs));
    uint32_t *lens = calloc((size_t)(n > 0 ? n : 1), sizeof(*lens));
    if (ptrs == NULL || lens == NULL) {
        free(ptrs);
        free(lens);
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(b)) {
            free(ptrs);
            free(lens);
            Py_DECREF(seq);
            return PyErr_Format(PyExc_TypeError, "frames must be bytes");
        }
        ptrs[i] = (const uint8_t *)PyBytes_AS_STRING(b);
        lens[i] = (uint32_t)PyBytes_GET_SIZE(b);
    }
    char err[256] = "";
    int64_t sent;
    Py_BEGIN_ALLOW_THREADS sent = dp_blast(ifname, ptrs, lens, (int)n, count, seconds, batch, err, sizeof(err));
    Py_END_ALLOW_THREADS free(ptrs);
    free(lens);
    Py_DECREF(seq);
    if (sent < 0) return errno_error((int)sent, err);
    return PyLong_FromLongLong(sent);
}

static PyObject *mod_ecmp_hash(PyObject *Py_UNUSED(m), PyObject *args) {
    unsigned int src, dst, proto, sport, dport, entropy;
    if (!PyArg_ParseTuple(args, "IIIIII", &src, &dst, &proto, &sport, &dport, &entropy)) return NULL;
    return PyLong_FromUnsignedLong(
        dp_ecmp_hash(src, dst, (uint8_t)proto, (uint16_t)sport, (uint16_t)dport, entropy));
}

static PyObject *mod_reasons(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
    PyObject *l = PyList_New(DP_NUM_REASONS);
    for (int r = 0; l != NULL && r < DP_NUM_REASONS; r++) PyList_SET_ITEM(l, r, PyUnicode_FromString(dp_reason_name(r)));
    return l;
}

static PyMethodDef module_methods[] = {
    {"blast", mod_blast, METH_VARARGS, "blast(ifname, frames, count, seconds, batch) -> frames sent"},
    {"ecmp_hash", mod_ecmp_hash, METH_VARARGS, "ecmp_hash(src, dst, proto, sport, dport, entropy)"},
    {"reasons", mod_reasons, METH_NOARGS, "drop reason names, by code"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_dataplane", "The C data plane of DLCP's software switch.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__dataplane(void) {
    if (PyType_Ready(&SwitchType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    Py_INCREF(&SwitchType);
    if (PyModule_AddObject(m, "Switch", (PyObject *)&SwitchType) < 0) {
        Py_DECREF(&SwitchType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "NUM_PORTS", DP_NUM_PORTS);
    PyModule_AddIntConstant(m, "NUM_QUEUES", DP_NUM_QUEUES);
    PyModule_AddIntConstant(m, "MAX_MEMBERS", DP_MAX_MEMBERS);
    PyModule_AddIntConstant(m, "MAX_GROUP_SLOTS", DP_MAX_GROUP_SLOTS);
    PyModule_AddIntConstant(m, "LINE_CAP", DP_LINE_CAP);
    PyModule_AddIntConstant(m, "WIRE_OVERHEAD", DP_WIRE_OVERHEAD);
    /* dlcp_classes: the bit each key starts at in the C key, in the P4Info's key order */
    PyObject *shifts = Py_BuildValue("(iiiii)", DP_CLASS_SHIFT_JOB_ID, DP_CLASS_SHIFT_PACKET_TYPE,
                                     DP_CLASS_SHIFT_PRIORITY, DP_CLASS_SHIFT_DROP_CLASS, DP_CLASS_SHIFT_KIND);
    if (shifts == NULL || PyModule_AddObject(m, "CLASS_KEY_SHIFTS", shifts) < 0) {
        Py_XDECREF(shifts);
        Py_DECREF(m);
        return NULL;
    }
    /* codes of the table calls, so Python never re-types them */
    static const struct {
        const char *name;
        int value;
    } codes[] = {
        {"OP_INSERT", DP_OP_INSERT}, {"OP_MODIFY", DP_OP_MODIFY}, {"OP_DELETE", DP_OP_DELETE},
        {"ROUTE_DROP", ROUTE_DROP}, {"ROUTE_GROUP", ROUTE_GROUP}, {"NH_MEMBER", NH_MEMBER},
        {"NH_GROUP", NH_GROUP}, {"MEMBER_SET_NEXT_HOP", MEMBER_SET_NEXT_HOP}, {"MEMBER_DROP", MEMBER_DROP},
        {"CLASS_USE_PRIORITY", CLASS_USE_PRIORITY}, {"CLASS_SET_QUEUE", CLASS_SET_QUEUE},
        {"CLASS_MARK_ELIGIBLE", CLASS_MARK_ELIGIBLE}, {"CONGESTION_ADMIT", CONGESTION_ADMIT},
        {"CONGESTION_DROP", CONGESTION_DROP}, {"CONGESTION_TRIM", CONGESTION_TRIM}, {"E_OK", DP_E_OK},
        {"E_FULL", DP_E_FULL}, {"E_EXISTS", DP_E_EXISTS}, {"E_MISSING", DP_E_MISSING},
        {"E_INVALID", DP_E_INVALID}, {"CTR_FORWARDED", DP_CTR_FORWARDED}, {"CTR_DROPPED", DP_CTR_DROPPED},
        {"CTR_TRIMMED", DP_CTR_TRIMMED},
    };
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) PyModule_AddIntConstant(m, codes[i].name, codes[i].value);
    return m;
}
