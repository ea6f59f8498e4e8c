/*
 * dlcp.host._fastpath, receive: the receive fast path of a DLCP endpoint, in C.
 *
 * One call of rx_batch() waits for data, takes up to `nslots` datagrams (GRO
 * buffers) with one recvmmsg, and places every segment that is an ordinary
 * full-size DATA packet of a message in the caller's table straight into that
 * message's buffer (stored, or added for a reduce-on-receive message), all
 * without the GIL. Everything else -- control packets, short last packets,
 * duplicates, packets of messages not in the table, anything malformed -- is
 * left where it lies and reported as runs of the ring buffer, which the Python
 * assembler then handles (and validates, and counts) exactly as it would
 * without this module. So this file decides nothing the assembler does not
 * also decide: it only takes the common case off the interpreter. (It sends two
 * replies Python would send the same: the STOP answering a probe of a completed
 * message, and the STOP of a message it completed whole; see rx_batch.)
 *
 * A segment is placed only if, against its table entry:
 *   - its length is exactly header + the entry's full payload,
 *   - header bytes [0, DLCP_INVARIANT_BYTES) equal the entry's (type DATA, version, job,
 *     token, message key, layer, kind, dtype, length, packet count),
 *   - seq < full_rows, offset == seq * elems_per_packet, and received[seq] == 0;
 * or it is the message's short last packet: length header + tail_bytes, the
 * header bytes of that packet, seq == full_rows. Then the bytes written lie
 * inside the buffer (full_rows * pb + tail_bytes is its size, as the Python
 * side builds the entry), so nothing is written outside a message's buffer.
 *
 * The header layout is not written here: it is read at compile time from
 * dlcp_constants.h, generated from dlcp.protocol (_fastpath.h).
 */
#include "_fastpath.h"

#include <errno.h>
#include <poll.h>
#include <time.h>

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define MAX_SLOTS 64
#define MAX_SEGS_PER_SLOT 64
#define CONTROL_BYTES 64

/* OP_STORE_RELIABLE: a stored message with loss bound 0, which completes only when
 * every packet has arrived; only those are placed directly (see rx_batch). */
enum op { OP_STORE = 0, OP_ADD_F32 = 1, OP_ADD_F64 = 2, OP_ADD_I32 = 3, OP_STORE_RELIABLE = 4 };

/* One expected message. Mirrors ENTRY_DTYPE in host/fastpath.py (144 bytes). */
typedef struct {
    uint8_t inv[28];      /* header bytes [0, DLCP_INVARIANT_BYTES) of a full packet */
    uint32_t full_rows;   /* packets 0 .. full_rows-1 are full; packet full_rows is the short tail, if any */
    uint64_t dst;
    uint64_t received;
    uint32_t pb;          /* payload bytes of a full packet */
    uint32_t epp;         /* elements per full packet */
    uint32_t op;
    uint32_t tail_bytes;  /* payload bytes of the short last packet; 0: none */
    uint8_t inv_tail[28]; /* header bytes [0, DLCP_INVARIANT_BYTES) of the short last packet */
    uint32_t placed;      /* out: packets placed */
    uint32_t last_seen;   /* out: a LAST flag was seen */
    uint32_t priority;    /* out: priority byte of the last placed packet */
    uint64_t placed_elems; /* out: elements placed */
    uint32_t need;        /* in: packets to place before the message may complete (0: no limit); with
                             NEED_WHOLE set, that many are every packet still missing (the sender is not
                             done), so placing them completes the message whole and C sends its STOP */
    uint32_t probed;      /* out: a PROBE for this message arrived (Python decides what it answers) */
    uint32_t probe_seq;   /* out: the newest such probe's id (its seq field) */
    uint32_t stop_ip;     /* in: where the message's STOP goes (the sender's registered address, host
                             byte order; 0: C never sends it) */
    uint16_t stop_port;
    uint8_t stop_tos;     /* in: IP TOS byte and priority field of the control class */
    uint8_t stop_prio;
    uint32_t stop_sent;   /* out: C completed the message whole in this call and sent its STOP */
    uint8_t pad[8];
} entry_t;

_Static_assert(sizeof(entry_t) == 144, "entry_t must match ENTRY_DTYPE");
_Static_assert(DLCP_INVARIANT_BYTES <= sizeof(((entry_t *)0)->inv), "the invariant header bytes fit an entry");

#define NEED_WHOLE 0x80000000u

/* A message this endpoint completed: a PROBE for it is answered with a STOP here.
 * Mirrors DONE_DTYPE in host/fastpath.py (32 bytes). */
typedef struct {
    uint8_t hdr[20];   /* header bytes [0, 20) of the message's packets; kind, dtype and key are compared */
    uint32_t ip;       /* the sender's registered address (host byte order) */
    uint16_t port;
    uint8_t tos;       /* IP TOS byte of the control class */
    uint8_t priority;  /* the control class, for the reply's priority field */
    uint32_t answered; /* out: STOPs sent for this row in this call */
} done_t;

_Static_assert(sizeof(done_t) == 32, "done_t must match DONE_DTYPE");
_Static_assert(FP_KEY_END <= sizeof(((done_t *)0)->hdr) && DLCP_OFF_KIND + 2 <= sizeof(((done_t *)0)->hdr),
               "a message's key, kind and dtype fit the header bytes a control table row keeps");

/* A message this endpoint is sending and whose STOP it awaits. Mirrors SEND_DTYPE (32 bytes). */
typedef struct {
    uint8_t hdr[20];    /* header bytes [0, 20) of the message's packets */
    uint32_t stopped;   /* out: STOPs (no payload, offset 0) that arrived in this call */
    uint32_t stop_seq;  /* out: the newest one's seq (the probe it answers; 0: unasked) */
    uint32_t pad;
} send_t;

_Static_assert(sizeof(send_t) == 32, "send_t must match SEND_DTYPE");

/* dst[i] += src[i]. `dst` is always aligned (a message buffer, offset by whole
 * packets); `src` sits HEADER_SIZE bytes into a segment and normally is too, but
 * if it is not, the elements are staged through an aligned block first. */
#define DEFINE_ADD(NAME, T, WRAP)                                                  \
    static void NAME(uint8_t *dst_bytes, const uint8_t *src_bytes, size_t n) {     \
        T *restrict d = (T *)dst_bytes;                                            \
        if ((uintptr_t)src_bytes % _Alignof(T) == 0) {                             \
            const T *restrict s = (const T *)src_bytes;                            \
            for (size_t i = 0; i < n; i++) d[i] = (T)(WRAP d[i] + WRAP s[i]);      \
            return;                                                                \
        }                                                                          \
        T tmp[512];                                                                \
        for (size_t done = 0; done < n;) {                                         \
            size_t k = n - done < 512 ? n - done : 512;                            \
            memcpy(tmp, src_bytes + done * sizeof(T), k * sizeof(T));              \
            for (size_t i = 0; i < k; i++) d[done + i] = (T)(WRAP d[done + i] + WRAP tmp[i]); \
            done += k;                                                             \
        }                                                                          \
    }

DEFINE_ADD(add_f32, float, )
DEFINE_ADD(add_f64, double, )
/* int32 wraps around like numpy's: added as uint32 (no signed overflow). */
DEFINE_ADD(add_i32, int32_t, (uint32_t))

/* Place one segment if it is the common case; returns 1 if placed. `tail`: the
 * segment matched the short last packet's header (so its payload is tail_bytes). */
static int place(entry_t *e, const uint8_t *seg, int tail) {
    uint32_t seq = be32(seg + DLCP_OFF_SEQ);
    if (tail ? seq != e->full_rows : seq >= e->full_rows) return 0;
    if ((uint64_t)be32(seg + DLCP_OFF_OFFSET) != (uint64_t)seq * e->epp) return 0;
    uint8_t *received = (uint8_t *)(uintptr_t)e->received;
    if (received[seq]) return 0;
    uint8_t *dst = (uint8_t *)(uintptr_t)e->dst + (size_t)seq * e->pb;
    const uint8_t *src = seg + DLCP_HEADER_BYTES;
    size_t nbytes = tail ? e->tail_bytes : e->pb;
    switch (e->op) {
    case OP_STORE:
    case OP_STORE_RELIABLE: memcpy(dst, src, nbytes); break;
    case OP_ADD_F32: add_f32(dst, src, nbytes / 4); break;
    case OP_ADD_F64: add_f64(dst, src, nbytes / 8); break;
    case OP_ADD_I32: add_i32(dst, src, nbytes / 4); break;
    default: return 0;
    }
    received[seq] = 1;
    e->placed++;
    e->placed_elems += tail ? (uint64_t)e->tail_bytes / (e->pb / e->epp) : e->epp;
    e->priority = seg[DLCP_OFF_PRIORITY];
    if (seg[DLCP_OFF_FLAGS] & DLCP_FLAG_LAST) e->last_seen = 1;
    return 1;
}

/* The entry whose full (or, setting *tail, short last) packet header this segment has. */
static entry_t *match(entry_t *entries, Py_ssize_t n, Py_ssize_t *hint, const uint8_t *seg, size_t len, int *tail) {
    if (n == 0 || seg[0] != FP_VER_TYPE(DLCP_TYPE_DATA)) return NULL;
    entry_t *e = &entries[*hint];
    *tail = 0;
    if (len == DLCP_HEADER_BYTES + e->pb && memcmp(seg, e->inv, DLCP_INVARIANT_BYTES) == 0) return e;
    for (Py_ssize_t i = 0; i < n; i++) {
        e = &entries[i];
        if (len == DLCP_HEADER_BYTES + e->pb && memcmp(seg, e->inv, DLCP_INVARIANT_BYTES) == 0) {
            *hint = i;
            return e;
        }
        if (e->tail_bytes && len == DLCP_HEADER_BYTES + e->tail_bytes && memcmp(seg, e->inv_tail, DLCP_INVARIANT_BYTES) == 0) {
            *tail = 1;
            return e;
        }
    }
    return NULL;
}

/* Length, GRO segment size and truncation of one received datagram. */
static void geometry(struct mmsghdr *m, size_t slot_bytes, size_t *len, size_t *gso, int *trunc) {
    *len = m->msg_len;
    *trunc = (m->msg_hdr.msg_flags & MSG_TRUNC) != 0;
    if (*trunc) *len = slot_bytes;
    *gso = *len;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m->msg_hdr); c; c = CMSG_NXTHDR(&m->msg_hdr, c)) {
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
            int g;
            memcpy(&g, CMSG_DATA(c), sizeof g);
            if (g > 0) *gso = (size_t)g;
        }
    }
    if (*gso == 0) *gso = *len ? *len : 1;
}

/* The most runs one slot can leave: runs are separated by consumed segments.
 * A consumed DATA segment (placed, or dropped by loss injection) has more than a
 * header's bytes; a consumed control segment exactly a header's, and then every
 * segment before it in the datagram is at least that long too (all but a
 * datagram's last segment have its GRO size). So a run and the consumed segment
 * after it take at least header_size + 1 bytes, whatever segment size a sender chose. */
static Py_ssize_t runs_per_slot(Py_ssize_t slot_bytes) { return slot_bytes / (Py_ssize_t)(DLCP_HEADER_BYTES + 1) + 2; }

PyObject *runs_capacity(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t slot_bytes;
    if (!PyArg_ParseTuple(args, "n", &slot_bytes)) return NULL;
    return PyLong_FromSsize_t(runs_per_slot(slot_bytes));
}

static int hdr_matches(const entry_t *e, const uint8_t *seg, uint32_t want_seq) {
    return memcmp(seg, e->inv, DLCP_INVARIANT_BYTES) == 0 && be32(seg + DLCP_OFF_SEQ) == want_seq &&
           (uint64_t)be32(seg + DLCP_OFF_OFFSET) == (uint64_t)want_seq * e->epp;
}

/* What one rx_batch call works with, and what its rounds add up. */
typedef struct {
    int fd;
    uint8_t *base;
    Py_ssize_t slot_bytes, seg_size, nslots, nentries;
    struct iovec *iov;
    entry_t *entries;
    int64_t *out_runs;
    const uint8_t *draw;
    Py_ssize_t ndraws, drop_pos;
    Py_ssize_t nruns, injected, truncated, direct, cache, hint_entry, hint_seq;
    done_t *done;
    send_t *sends;
    Py_ssize_t ndone, nsends;
    int64_t *done_state; /* [next row to write, rows in use] of the done ring (DONE_ROWS = its capacity) */
    Py_ssize_t done_cap;
    Py_ssize_t control, answered, events; /* control packets consumed; STOPs sent; of those, ones Python must see */
    Py_ssize_t stops; /* STOPs of messages completed whole in this call (stop_whole) */
    int err;
} rx_ctx;

/* A run of the ring left for Python: (start, nbytes, segment size). A run that
 * continues the previous one in the ring (the next slot, the same segment size, the
 * previous one whole segments) extends it: early packets of a message arrive over
 * many GRO datagrams, and each run costs Python one call of the assembler. */
static void emit_run(rx_ctx *c, int64_t start, int64_t len, size_t gso) {
    if (c->nruns) {
        int64_t *prev = &c->out_runs[3 * (c->nruns - 1)];
        if (prev[0] + prev[1] == start && prev[2] == (int64_t)gso && prev[1] % (int64_t)gso == 0) {
            prev[1] += len;
            return;
        }
    }
    c->out_runs[3 * c->nruns] = start;
    c->out_runs[3 * c->nruns + 1] = len;
    c->out_runs[3 * c->nruns + 2] = (int64_t)gso;
    c->nruns++;
}

static int same_message(const uint8_t *seg, const uint8_t *row) {
    return memcmp(seg + DLCP_OFF_KIND, row + DLCP_OFF_KIND, 2) == 0 && memcmp(seg + FP_KEY_AT, row + FP_KEY_AT, FP_KEY_END - FP_KEY_AT) == 0;
}

/* One header-only control packet to ip:port (host byte order) with IP TOS `tos`; returns 1 if it went out.
 * A failed send (full buffer, refused) is like a lost one: the peer probes again. */
static int send_header(int fd, const uint8_t *h, uint32_t ip, uint16_t port, int tos) {
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(ip)};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    put_tos((struct cmsghdr *)ctl.buf, tos);
    struct iovec v = {.iov_base = (void *)h, .iov_len = DLCP_HEADER_BYTES};
    struct msghdr m = {.msg_name = &to, .msg_namelen = sizeof to, .msg_iov = &v, .msg_iovlen = 1,
                       .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    return sendmsg(fd, &m, MSG_DONTWAIT) == (ssize_t)DLCP_HEADER_BYTES;
}

/* STOP (FINAL, no payload) for a PROBE of a message in the done table, from the probe's own header. */
static void answer_probe(rx_ctx *c, done_t *d, const uint8_t *probe) {
    uint8_t h[DLCP_HEADER_BYTES];
    memcpy(h, probe, DLCP_HEADER_BYTES);
    h[0] = (uint8_t)FP_VER_TYPE(DLCP_TYPE_STOP);
    h[DLCP_OFF_FLAGS] = (uint8_t)DLCP_FLAG_FINAL;
    h[DLCP_OFF_PRIORITY] = d->priority;
    h[DLCP_OFF_DROP_CLASS] = 0;
    if (send_header(c->fd, h, d->ip, d->port, d->tos)) {
        d->answered++;
        c->answered++;
    }
}

/* The STOP of every message this call completed whole (see entry_t.need): the one Python's
 * completion would send (FINAL, no payload, seq 0 as no probe asked, the control class),
 * built from the message's own header bytes, sent as soon as the last packet is placed rather
 * than once Python has booked the call. Python is told (stop_sent) and sends none itself. */
static void stop_whole(rx_ctx *c) {
    for (Py_ssize_t i = 0; i < c->nentries; i++) {
        entry_t *e = &c->entries[i];
        uint32_t need = e->need & ~NEED_WHOLE;
        if (!(e->need & NEED_WHOLE) || !need || !e->stop_ip || e->stop_sent || e->placed < need) continue;
        uint8_t h[DLCP_HEADER_BYTES];
        memset(h, 0, DLCP_HEADER_BYTES);
        memcpy(h, e->full_rows ? e->inv : e->inv_tail, DLCP_INVARIANT_BYTES);
        h[0] = (uint8_t)FP_VER_TYPE(DLCP_TYPE_STOP);
        h[DLCP_OFF_LENGTH] = h[DLCP_OFF_LENGTH + 1] = 0;
        h[DLCP_OFF_FLAGS] = (uint8_t)DLCP_FLAG_FINAL;
        h[DLCP_OFF_PRIORITY] = e->stop_prio;
        if (send_header(c->fd, h, e->stop_ip, e->stop_port, e->stop_tos)) {
            e->stop_sent = 1;
            c->stops++;
            /* Later probes of it are answered from the done ring, as for a completion Python STOPped
             * (FastReceiver.remember_done): the same key bytes, address and class. */
            done_t *d = &c->done[c->done_state[0]];
            memcpy(d->hdr, h, sizeof d->hdr);
            d->ip = e->stop_ip;
            d->port = e->stop_port;
            d->tos = e->stop_tos;
            d->priority = e->stop_prio;
            d->answered = 0;
            c->done_state[0] = (c->done_state[0] + 1) % c->done_cap;
            if (c->done_state[1] < c->done_cap) c->ndone = ++c->done_state[1];
        }
    }
}

/* A control packet the C path handles itself; returns 1 if it consumed `seg`.
 * Only a lone header (no payload, offset 0) of type PROBE or STOP whose kind,
 * dtype and message key equal a table row's is consumed; everything else (a
 * BITMAP, a STOP with a bitmap, anything malformed or unknown) is left to the
 * assembler, which judges and counts it. Nothing is written but table fields. */
static int control(rx_ctx *c, const uint8_t *seg, size_t len) {
    if (len != DLCP_HEADER_BYTES || (seg[0] != FP_VER_TYPE(DLCP_TYPE_PROBE) && seg[0] != FP_VER_TYPE(DLCP_TYPE_STOP))) return 0;
    if (seg[DLCP_OFF_LENGTH] || seg[DLCP_OFF_LENGTH + 1] || be32(seg + DLCP_OFF_OFFSET)) return 0;
    uint32_t seq = be32(seg + DLCP_OFF_SEQ);
    if (seg[0] == FP_VER_TYPE(DLCP_TYPE_PROBE)) {
        for (Py_ssize_t i = 0; i < c->nentries; i++) {
            entry_t *e = &c->entries[i];
            if (same_message(seg, e->full_rows ? e->inv : e->inv_tail)) {
                if (!e->probed || seq > e->probe_seq) e->probe_seq = seq;
                e->probed = 1;
                c->control++;
                c->events++;
                return 1;
            }
        }
        for (Py_ssize_t i = 0; i < c->ndone; i++) {
            if (same_message(seg, c->done[i].hdr)) {
                answer_probe(c, &c->done[i], seg);
                c->control++;
                return 1;
            }
        }
        return 0;
    }
    for (Py_ssize_t i = 0; i < c->nsends; i++) {
        send_t *t = &c->sends[i];
        if (same_message(seg, t->hdr)) {
            if (!t->stopped || seq > t->stop_seq) t->stop_seq = seq;
            t->stopped++;
            c->control++;
            c->events++;
            return 1;
        }
    }
    return 0;
}

/* One recvmmsg of up to nslots datagrams, placed (direct placement, then the
 * ring) as described at rx_batch. Returns the number of datagrams; leftovers
 * are appended to c->out_runs. */
static int rx_round(rx_ctx *c) {
    const Py_ssize_t slot_bytes = c->slot_bytes, seg_size = c->seg_size, nslots = c->nslots;
    const size_t per = (size_t)(slot_bytes / seg_size), H = DLCP_HEADER_BYTES;
    entry_t *entries = c->entries;
    uint8_t *base = c->base;
    const uint8_t *draw = c->draw;
    struct mmsghdr msgs[MAX_SLOTS];
    uint8_t ctrl[MAX_SLOTS][CONTROL_BYTES] __attribute__((aligned(8)));
    int predicted[MAX_SLOTS];
    uint64_t pred_seq[MAX_SLOTS], done_mask[MAX_SLOTS];
    Py_ssize_t out_entry = c->hint_entry, out_seq = c->hint_seq;
    entry_t *pe = NULL;
    uint64_t next = 0;
    if (c->hint_entry >= 0 && c->hint_entry < c->nentries && entries[c->hint_entry].op == OP_STORE_RELIABLE &&
        (Py_ssize_t)(H + entries[c->hint_entry].pb) == seg_size && c->hint_seq >= 0) {
        pe = &entries[c->hint_entry];
        next = (uint64_t)c->hint_seq;
    }
    memset(msgs, 0, sizeof(struct mmsghdr) * (size_t)nslots);
    for (Py_ssize_t i = 0; i < nslots; i++) {
        uint8_t *slot = base + i * slot_bytes;
        struct iovec *v = c->iov + i * 2 * MAX_SEGS_PER_SLOT;
        predicted[i] = 0;
        done_mask[i] = 0;
        if (pe && next + per <= pe->full_rows) {
            const uint8_t *rcv = (const uint8_t *)(uintptr_t)pe->received;
            size_t k = 0;
            while (k < per && !rcv[next + k]) k++;
            predicted[i] = k == per;
        }
        if (predicted[i]) {
            uint8_t *dst = (uint8_t *)(uintptr_t)pe->dst;
            for (size_t k = 0; k < per; k++) {
                v[2 * k].iov_base = slot + k * (size_t)seg_size;
                v[2 * k].iov_len = H;
                v[2 * k + 1].iov_base = dst + (next + k) * pe->pb;
                v[2 * k + 1].iov_len = pe->pb;
            }
            msgs[i].msg_hdr.msg_iovlen = 2 * per;
            pred_seq[i] = next;
            next += per;
        } else {
            pe = NULL; /* the guess ran out: plain slots from here */
            v[0].iov_base = slot;
            v[0].iov_len = (size_t)slot_bytes;
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        msgs[i].msg_hdr.msg_iov = v;
        msgs[i].msg_hdr.msg_control = ctrl[i];
        msgs[i].msg_hdr.msg_controllen = CONTROL_BYTES;
    }
    int n = recvmmsg(c->fd, msgs, (unsigned)nslots, MSG_DONTWAIT, NULL);
    if (n < 0) {
        c->err = errno;
        return 0;
    }
    pe = c->hint_entry >= 0 && c->hint_entry < c->nentries ? &entries[c->hint_entry] : NULL;
    /* Pass 1: keep the right guesses, copy the rest back into the ring. Draws are
     * consumed in arrival order, so each segment's index in the stream is fixed here. */
    Py_ssize_t first_draw[MAX_SLOTS];
    size_t lens[MAX_SLOTS], gsos[MAX_SLOTS];
    int truncs[MAX_SLOTS];
    Py_ssize_t pos = c->drop_pos;
    int last_slot = -1;
    for (int i = 0; i < n; i++) {
        geometry(&msgs[i], (size_t)slot_bytes, &lens[i], &gsos[i], &truncs[i]);
        size_t len = lens[i], gso = gsos[i];
        int trunc = truncs[i];
        first_draw[i] = pos;
        pos += (Py_ssize_t)((len + gso - 1) / gso);
        if (!predicted[i]) continue;
        uint8_t *slot = base + (size_t)i * (size_t)slot_bytes;
        uint8_t *dst = (uint8_t *)(uintptr_t)pe->dst;
        uint8_t *rcv = (uint8_t *)(uintptr_t)pe->received;
        for (size_t k = 0; k < per && k * (size_t)seg_size < len; k++) {
            uint8_t *seg = slot + k * (size_t)seg_size;
            uint8_t *zone = dst + (pred_seq[i] + k) * pe->pb;
            size_t have = len - k * (size_t)seg_size;
            uint64_t seq = pred_seq[i] + k;
            Py_ssize_t d = first_draw[i] + (Py_ssize_t)k;
            int dropped = draw && d < c->ndraws && draw[d] && seg[0] == FP_VER_TYPE(DLCP_TYPE_DATA);
            if (!trunc && gso == (size_t)seg_size && have >= (size_t)seg_size && !dropped &&
                hdr_matches(pe, seg, (uint32_t)seq)) {
                rcv[seq] = 1;
                pe->placed++;
                pe->placed_elems += pe->epp;
                pe->priority = seg[DLCP_OFF_PRIORITY];
                if (seg[DLCP_OFF_FLAGS] & DLCP_FLAG_LAST) pe->last_seen = 1;
                done_mask[i] |= 1ull << k;
                c->direct++;
                last_slot = i;
                out_seq = (Py_ssize_t)seq + 1;
            } else if (have > H) {
                size_t m = have - H < pe->pb ? have - H : pe->pb;
                memmove(seg + H, zone, m);
            }
        }
    }
    /* Pass 2: every slot in its plain layout; segments kept in pass 1 are skipped. */
    for (int i = 0; i < n; i++) {
        uint8_t *slot = base + (size_t)i * (size_t)slot_bytes;
        size_t len = lens[i], gso = gsos[i];
        if (truncs[i]) c->truncated++;
        Py_ssize_t d = first_draw[i];
        int64_t run_start = -1, run_len = 0;
        for (size_t off = 0, j = 0; off < len; off += gso, j++, d++) {
            size_t seg_len = len - off < gso ? len - off : gso;
            uint8_t *seg = slot + off;
            int consumed = j < 64 && (done_mask[i] >> j) & 1;
            if (!consumed && draw && d < c->ndraws && draw[d] && seg_len > H && seg[0] == FP_VER_TYPE(DLCP_TYPE_DATA)) {
                c->injected++;
                consumed = 1;
            }
            if (!consumed && seg_len == H && control(c, seg, seg_len)) consumed = 1;
            if (!consumed && seg_len >= H) {
                int tail;
                entry_t *e = match(entries, c->nentries, &c->cache, seg, seg_len, &tail);
                if (e && place(e, seg, tail)) {
                    consumed = 1;
                    if (i >= last_slot) { /* the latest arrival: where the next batch likely goes on */
                        last_slot = i;
                        out_entry = e - entries;
                        out_seq = (Py_ssize_t)be32(seg + DLCP_OFF_SEQ) + 1;
                    }
                }
            }
            if (consumed) {
                if (run_start >= 0) emit_run(c, run_start, run_len, gso);
                run_start = -1;
                continue;
            }
            if (run_start < 0) {
                run_start = (int64_t)(slot - base + off);
                run_len = 0;
            }
            run_len += (int64_t)seg_len;
        }
        if (run_start >= 0) emit_run(c, run_start, run_len, gso);
    }
    if (draw) c->drop_pos = pos < c->ndraws ? pos : c->ndraws;
    c->hint_entry = out_entry;
    c->hint_seq = out_seq;
    return n;
}

/* Whether another round may run: nothing left for Python, no message that may
 * have completed or whose sender said LAST, and draws for a whole batch. */
static int may_continue(const rx_ctx *c) {
    if (c->nruns || c->err || c->events) return 0;
    for (Py_ssize_t i = 0; i < c->nentries; i++) {
        const entry_t *e = &c->entries[i];
        uint32_t need = e->need & ~NEED_WHOLE;
        if (e->last_seen || (need && e->placed >= need)) return 0;
    }
    return !c->draw || c->ndraws - c->drop_pos >= c->nslots * MAX_SEGS_PER_SLOT;
}

static long long elapsed_us(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)(t.tv_sec - t0->tv_sec) * 1000000 + (t.tv_nsec - t0->tv_nsec) / 1000;
}

/* What Python books after a call, as Python objects built once here (the GIL held):
 * reading the same from the numpy tables cost a flatnonzero and a structured-field
 * access per field, per call. Each returns a new list, or NULL with an exception. */
static PyObject *touched_entries(const rx_ctx *c) {
    PyObject *list = PyList_New(0);
    for (Py_ssize_t i = 0; list && i < c->nentries; i++) {
        const entry_t *e = &c->entries[i];
        if (!e->placed && !e->last_seen && !e->probed) continue;
        /* (index, packets placed, elements placed, priority, LAST seen, PROBE seen, newest probe id, STOP sent) */
        PyObject *t = Py_BuildValue("(nIKIiiIi)", i, e->placed, (unsigned long long)e->placed_elems, e->priority,
                                    e->last_seen != 0, e->probed != 0, e->probe_seq, e->stop_sent != 0);
        if (!t || PyList_Append(list, t) < 0) Py_CLEAR(list);
        Py_XDECREF(t);
    }
    return list;
}

static PyObject *stopped_sends(const rx_ctx *c) {
    PyObject *list = PyList_New(0);
    for (Py_ssize_t i = 0; list && i < c->nsends; i++) {
        if (!c->sends[i].stopped) continue;
        PyObject *v = PyLong_FromSsize_t(i);
        if (!v || PyList_Append(list, v) < 0) Py_CLEAR(list);
        Py_XDECREF(v);
    }
    return list;
}

static PyObject *answered_rows(const rx_ctx *c) {
    PyObject *list = PyList_New(0);
    for (Py_ssize_t i = 0; list && c->answered && i < c->ndone; i++) {
        if (!c->done[i].answered) continue;
        PyObject *v = PyLong_FromSsize_t(i);
        if (!v || PyList_Append(list, v) < 0) Py_CLEAR(list);
        Py_XDECREF(v);
    }
    return list;
}

/*
 * rx_batch(fd, ring, slot_bytes, seg_size, nslots, timeout_ms, entries, nentries, runs, drops, drop_pos,
 *          hint_entry, hint_seq, generation, table_generation, budget_us)
 *   -> (datagrams, nruns, drop_pos, injected, truncated, direct, hint_entry, hint_seq, control, answered,
 *       stops, touched, stopped, answered_rows)
 *
 * ring: writable buffer of nslots * slot_bytes; entries: writable buffer of
 * nentries entry_t; runs: writable int64 buffer of at least 3 * nslots *
 * runs_per_slot(slot_bytes) values, filled with (start, nbytes, seg_size) runs of
 * the ring left for Python; drops: None or a uint8 buffer of loss-injection
 * draws, one consumed per segment from drop_pos (nonzero: drop it if DATA).
 * generation: an int64 buffer the assembler bumps whenever its expected
 * messages change; if it no longer equals table_generation when data arrives,
 * the call returns without receiving, so the caller rebuilds the table first
 * (a message posted while this thread waited is then placed here, not by Python).
 *
 * Rounds. The first round waits up to timeout_ms for data. While Python has
 * nothing to do (see may_continue: no leftover runs, no entry whose `need` is
 * met or that saw LAST, the table still current), further rounds run for up
 * to budget_us from the call's start, waiting for data within that budget;
 * so Python books the placed packets (entries' out fields, summed over the
 * rounds) once per budget or per event, not once per recvmmsg. budget_us 0:
 * one round.
 *
 * Completion STOPs. After each round, an entry whose `need` carries NEED_WHOLE
 * (every packet still missing, the sender not done) and whose placed count
 * reached it is complete with nothing lost, which is the one completion C can
 * judge alone; its STOP is sent here (stop_whole), at once and without the
 * GIL, and reported in `touched` so that Python's completion sends none.
 * Python still books the completion (one rule: Assembler.account_placed).
 *
 * Direct placement. For a reliable stored message (op OP_STORE_RELIABLE) the
 * next packets usually continue where the last batch stopped (hint_entry,
 * hint_seq), so slots are posted with a header/payload iovec pair per
 * segment whose payload half points straight into the message buffer at the
 * predicted sequence numbers, if those packets are all still missing there.
 * Pass 1 keeps each segment that is exactly the predicted packet and copies
 * every other payload back into the ring (restoring the plain layout); pass 2
 * then handles the ring as if nothing had been predicted. A wrong guess costs
 * the copy that placement costs anyway; it may leave stray bytes in packets
 * still missing, which is harmless only because a reliable message
 * completes when every packet has arrived and overwritten them.
 */
PyObject *rx_batch(PyObject *self, PyObject *args) {
    (void)self;
    int fd, timeout_ms;
    Py_ssize_t slot_bytes, seg_size, nslots, nentries, drop_pos, hint_entry, hint_seq, budget_us;
    long long table_gen;
    Py_buffer ring, ents, runs, gen, drops = {0};
    PyObject *drops_obj;
    Py_buffer done, sends;
    Py_buffer done_state;
    Py_ssize_t nsends;
    if (!PyArg_ParseTuple(args, "iw*nnniw*nw*Onnny*Lnw*w*w*n", &fd, &ring, &slot_bytes, &seg_size, &nslots,
                          &timeout_ms, &ents, &nentries, &runs, &drops_obj, &drop_pos, &hint_entry, &hint_seq, &gen,
                          &table_gen, &budget_us, &done, &done_state, &sends, &nsends))
        return NULL;
    int64_t *dstate = (int64_t *)done_state.buf;
    Py_ssize_t done_cap = done.len / (Py_ssize_t)sizeof(done_t), ndone = 0;
    PyObject *result = NULL;
    struct iovec *iov = NULL;
    int have_drops = drops_obj != Py_None;
    if (have_drops && PyObject_GetBuffer(drops_obj, &drops, PyBUF_SIMPLE) < 0) goto out;
    if (nslots < 1 || nslots > MAX_SLOTS || slot_bytes < (Py_ssize_t)DLCP_HEADER_BYTES ||
        ring.len < slot_bytes * nslots || seg_size <= (Py_ssize_t)DLCP_HEADER_BYTES || slot_bytes % seg_size ||
        slot_bytes / seg_size > MAX_SEGS_PER_SLOT) {
        PyErr_SetString(PyExc_ValueError, "ring buffer smaller than nslots * slot_bytes, or bad slot geometry");
        goto out;
    }
    if (nentries < 0 || ents.len < nentries * (Py_ssize_t)sizeof(entry_t)) {
        PyErr_SetString(PyExc_ValueError, "entries buffer smaller than nentries entries");
        goto out;
    }
    if (runs.len < (Py_ssize_t)(3 * sizeof(int64_t)) * nslots * runs_per_slot(slot_bytes)) {
        PyErr_SetString(PyExc_ValueError, "runs buffer too small");
        goto out;
    }
    if (done_state.len < 2 * (Py_ssize_t)sizeof(int64_t) || done_cap < 1 || dstate[0] < 0 ||
        dstate[0] >= done_cap || dstate[1] < 0 || dstate[1] > done_cap || nsends < 0 ||
        sends.len < nsends * (Py_ssize_t)sizeof(send_t)) {
        PyErr_SetString(PyExc_ValueError, "done ring state outside the done buffer, or sends buffer too small");
        goto out;
    }
    ndone = (Py_ssize_t)dstate[1];
    if (gen.len < (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "generation buffer smaller than one int64");
        goto out;
    }
    if (have_drops && (drop_pos < 0 || drop_pos > drops.len)) {
        PyErr_SetString(PyExc_ValueError, "drop_pos outside the drops buffer");
        goto out;
    }
    iov = PyMem_RawMalloc(sizeof(struct iovec) * (size_t)nslots * 2 * MAX_SEGS_PER_SLOT);
    if (!iov) {
        PyErr_NoMemory();
        goto out;
    }

    rx_ctx c = {
        .fd = fd, .base = (uint8_t *)ring.buf, .slot_bytes = slot_bytes, .seg_size = seg_size, .nslots = nslots,
        .nentries = nentries, .iov = iov, .entries = (entry_t *)ents.buf, .out_runs = (int64_t *)runs.buf,
        .draw = have_drops ? (const uint8_t *)drops.buf : NULL, .ndraws = have_drops ? drops.len : 0,
        .drop_pos = drop_pos, .hint_entry = hint_entry, .hint_seq = hint_seq,
        .done = (done_t *)done.buf, .ndone = ndone, .sends = (send_t *)sends.buf, .nsends = nsends,
        .done_state = dstate, .done_cap = done_cap,
    };
    int n = 0;

    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < nentries; i++) {
        c.entries[i].placed = 0;
        c.entries[i].last_seen = 0;
        c.entries[i].placed_elems = 0;
        c.entries[i].probed = 0;
        c.entries[i].probe_seq = 0;
        c.entries[i].stop_sent = 0;
    }
    for (Py_ssize_t i = 0; i < ndone; i++) c.done[i].answered = 0;
    for (Py_ssize_t i = 0; i < nsends; i++) {
        c.sends[i].stopped = 0;
        c.sends[i].stop_seq = 0;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    const volatile int64_t *generation = (const volatile int64_t *)gen.buf;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int round = 0;; round++) {
        int ready;
        if (round == 0) {
            ready = poll(&pfd, 1, timeout_ms) > 0;
        } else {
            long long left = (long long)budget_us - elapsed_us(&t0);
            if (left <= 0) break;
            struct timespec ts = {.tv_sec = (time_t)(left / 1000000), .tv_nsec = (long)(left % 1000000) * 1000};
            ready = ppoll(&pfd, 1, &ts, NULL) > 0;
        }
        if (!ready || *generation != (int64_t)table_gen) break;
        int got = rx_round(&c);
        n += got;
        stop_whole(&c);
        if (got == 0 || budget_us <= 0 || !may_continue(&c)) break;
    }
    Py_END_ALLOW_THREADS

    int err = c.err;
    if (err && err != EAGAIN && err != EWOULDBLOCK && err != EINTR && err != ECONNREFUSED) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto out;
    }
    PyObject *touched = touched_entries(&c), *stopped = stopped_sends(&c), *rows = answered_rows(&c);
    if (touched && stopped && rows)
        result = Py_BuildValue("(innnnnnnnnnOOO)", n, c.nruns, c.drop_pos, c.injected, c.truncated, c.direct,
                               c.hint_entry, c.hint_seq, c.control, c.answered, c.stops, touched, stopped, rows);
    Py_XDECREF(touched);
    Py_XDECREF(stopped);
    Py_XDECREF(rows);
out:
    PyMem_RawFree(iov);
    PyBuffer_Release(&ring);
    PyBuffer_Release(&ents);
    PyBuffer_Release(&runs);
    PyBuffer_Release(&gen);
    PyBuffer_Release(&done);
    PyBuffer_Release(&done_state);
    PyBuffer_Release(&sends);
    if (have_drops && drops.obj) PyBuffer_Release(&drops);
    return result;
}

/*
 * place_runs(ring, runs_in, nruns_in, entries, nentries, runs_out) -> (nruns_out, touched)
 *
 * The runs an rx_batch call left, placed again against a rebuilt table: a message
 * posted while C was receiving (the table is rebuilt only between calls) had its
 * packets left in the ring, and the assembler would place them in numpy. Each run
 * (start, nbytes, segment size) is split into segments exactly as rx_batch does;
 * a segment is placed under the same checks (match, place), and what is not placed
 * (control packets, packets of messages still not expected, anything malformed)
 * is reported as runs for the assembler, as rx_batch would have. `touched` as
 * rx_batch's (the entries' out fields are reset first). Writes only inside message
 * buffers, under the same checks; runs_in must lie inside the ring.
 */
PyObject *place_runs(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer ring, rin, ents, rout;
    Py_ssize_t nin, nentries;
    if (!PyArg_ParseTuple(args, "w*y*nw*nw*", &ring, &rin, &nin, &ents, &nentries, &rout)) return NULL;
    PyObject *result = NULL;
    const int64_t *in = (const int64_t *)rin.buf;
    if (nin < 0 || rin.len < nin * 3 * (Py_ssize_t)sizeof(int64_t) || nentries < 0 ||
        ents.len < nentries * (Py_ssize_t)sizeof(entry_t)) {
        PyErr_SetString(PyExc_ValueError, "runs or entries buffer smaller than its count");
        goto out;
    }
    /* Each input run can leave at most one output run per segment boundary: bound the output by the
     * segments of the input, at most one run per two segments plus one per input run. */
    Py_ssize_t need_out = 0;
    for (Py_ssize_t r = 0; r < nin; r++) {
        int64_t start = in[3 * r], len = in[3 * r + 1], gso = in[3 * r + 2];
        if (start < 0 || len < 0 || gso <= 0 || start > (int64_t)ring.len || len > (int64_t)ring.len - start) {
            PyErr_SetString(PyExc_ValueError, "a run lies outside the ring");
            goto out;
        }
        need_out += (Py_ssize_t)(len / gso) / 2 + 2;
    }
    if (rout.len < need_out * 3 * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "runs_out buffer too small");
        goto out;
    }
    rx_ctx c = {.base = (uint8_t *)ring.buf, .nentries = nentries, .entries = (entry_t *)ents.buf,
                .out_runs = (int64_t *)rout.buf};
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < nentries; i++) {
        entry_t *e = &c.entries[i];
        e->placed = e->last_seen = e->probed = e->probe_seq = e->stop_sent = 0;
        e->placed_elems = 0;
    }
    for (Py_ssize_t r = 0; r < nin; r++) {
        int64_t start = in[3 * r], len = in[3 * r + 1];
        size_t gso = (size_t)in[3 * r + 2];
        int64_t run_start = -1, run_len = 0;
        for (int64_t off = 0; off < len; off += (int64_t)gso) {
            size_t seg_len = (size_t)(len - off) < gso ? (size_t)(len - off) : gso;
            uint8_t *seg = c.base + start + off;
            int consumed = 0;
            if (seg_len >= DLCP_HEADER_BYTES) {
                int tail;
                entry_t *e = match(c.entries, c.nentries, &c.cache, seg, seg_len, &tail);
                consumed = e && place(e, seg, tail);
            }
            if (consumed) {
                if (run_start >= 0) emit_run(&c, run_start, run_len, gso);
                run_start = -1;
                continue;
            }
            if (run_start < 0) {
                run_start = start + off;
                run_len = 0;
            }
            run_len += (int64_t)seg_len;
        }
        if (run_start >= 0) emit_run(&c, run_start, run_len, gso);
    }
    Py_END_ALLOW_THREADS
    PyObject *touched = touched_entries(&c);
    if (touched) result = Py_BuildValue("(nO)", c.nruns, touched);
    Py_XDECREF(touched);
out:
    PyBuffer_Release(&ring);
    PyBuffer_Release(&rin);
    PyBuffer_Release(&ents);
    PyBuffer_Release(&rout);
    return result;
}
