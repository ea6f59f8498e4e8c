/*
 * What the C sources of dlcp.host._fastpath share: the header layout, read at compile
 * time from dlcp_constants.h (generated from dlcp/protocol.py by `dlcp p4 gen-constants`,
 * the same header the software switch and the simulator read), a few helpers, and the
 * module's functions (one file each: receive, send, drop classes; _fastpath.c registers them).
 */
#ifndef DLCP_FASTPATH_H
#define DLCP_FASTPATH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "dlcp_constants.h"

/* The first header byte of a packet of type `t`: version << 4 | type. */
#define FP_VER_TYPE(t) ((DLCP_VERSION << DLCP_VERSION_SHIFT) | (t))
/* The header bytes [FP_KEY_AT, FP_KEY_END) name a message (job, src, token, msg_id, round);
 * [DLCP_OFF_KIND, DLCP_OFF_KIND + 2) are its kind and dtype. */
#define FP_KEY_AT DLCP_OFF_JOB_ID
#define FP_KEY_END (DLCP_OFF_ROUND + DLCP_SIZE_ROUND)

/* What the code below reads of the layout: big-endian 32-bit seq and offset, a 16-bit length,
 * one-byte flags, priority and drop class, kind and dtype side by side, all inside the header. */
_Static_assert(DLCP_SIZE_SEQ == 4 && DLCP_SIZE_OFFSET == 4 && DLCP_SIZE_LENGTH == 2, "seq, offset, length widths");
_Static_assert(DLCP_SIZE_FLAGS == 1 && DLCP_SIZE_PRIORITY == 1 && DLCP_SIZE_DROP_CLASS == 1, "one-byte fields");
_Static_assert(DLCP_OFF_DTYPE == DLCP_OFF_KIND + 1, "kind and dtype are adjacent");
_Static_assert(DLCP_OFF_SEQ + 4 <= DLCP_HEADER_BYTES && DLCP_OFF_OFFSET + 4 <= DLCP_HEADER_BYTES &&
                   DLCP_OFF_LENGTH + 2 <= DLCP_HEADER_BYTES,
               "fields inside the header");
_Static_assert(DLCP_OFF_VER_TYPE == 0, "the version and type byte comes first");

/* Not exported from the shared object: the module's functions are reached through its method table. */
#define FP_INTERNAL __attribute__((visibility("hidden")))

static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* One IP_TOS control message at c (room: CMSG_SPACE(sizeof(int))): the class a datagram leaves with. */
static inline void put_tos(struct cmsghdr *c, int tos) {
    c->cmsg_level = IPPROTO_IP;
    c->cmsg_type = IP_TOS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &tos, sizeof tos);
}

/* Receive (_fastpath_rx.c). */
FP_INTERNAL PyObject *runs_capacity(PyObject *self, PyObject *args);
FP_INTERNAL PyObject *rx_batch(PyObject *self, PyObject *args);
FP_INTERNAL PyObject *place_runs(PyObject *self, PyObject *args);

/* Send (_fastpath_tx.c). */
FP_INTERNAL PyObject *tx_send(PyObject *self, PyObject *args);

/* Drop classes (_fastpath_drop_classes.c). */
#define DC_MAX_SAMPLE 4096
FP_INTERNAL PyObject *drop_classes(PyObject *self, PyObject *args);

#endif /* DLCP_FASTPATH_H */
