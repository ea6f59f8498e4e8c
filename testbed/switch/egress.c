/* Egress queues, shaper and impairments of one port; see egress.h. */
#include "egress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define WRAP_MARK 0xFFFFFFFFu

static inline uint64_t rec_size(uint32_t len) { return DP_REC_HEADER + (((uint64_t)len + 7) & ~(uint64_t)7); }

static inline uint32_t rec_len(const dp_ring *r, uint64_t off) {
    uint32_t len;
    memcpy(&len, r->mem + off, sizeof(len));
    return len;
}

/* Where the record at `pos` really starts: a wrap mark or the end of the ring means 0. */
static inline uint64_t rec_start(const dp_ring *r, uint64_t pos) {
    return (pos == r->cap || rec_len(r, pos) == WRAP_MARK) ? 0 : pos;
}

static inline void ring_reset(dp_ring *r) {
    r->head = r->tail = r->deq = r->used = 0;
    r->last = DP_NO_REC;
}

static int64_t ring_write(dp_ring *r, const uint8_t *frame, uint32_t len) {
    uint64_t s = rec_size(len), off;
    if (r->used == 0) ring_reset(r);
    if (r->used == r->cap) return -1;
    if (r->head >= r->tail) { /* free: [head, cap) and [0, tail) */
        if (r->cap - r->head >= s) {
            off = r->head;
        } else if (r->tail >= s) {
            if (r->cap - r->head >= sizeof(uint32_t)) {
                uint32_t mark = WRAP_MARK;
                memcpy(r->mem + r->head, &mark, sizeof(mark));
            }
            r->used += r->cap - r->head;
            off = 0;
        } else {
            return -1;
        }
    } else { /* free: [head, tail) */
        if (r->tail - r->head < s) return -1;
        off = r->head;
    }
    memcpy(r->mem + off, &len, sizeof(len));
    memcpy(r->mem + off + 8, &r->last, sizeof(r->last));
    memcpy(r->mem + off + DP_REC_HEADER, frame, len);
    r->head = off + s;
    r->used += s;
    r->last = off;
    return (int64_t)off;
}

/* Removes the newest record, which must be queued (not dequeued); returns its length. */
static uint32_t ring_pop_newest(dp_ring *r) {
    uint64_t off = r->last;
    uint32_t len = rec_len(r, off);
    r->pkts--;
    r->bytes -= len;
    if (rec_start(r, r->tail) == off) { /* it was the only record left */
        ring_reset(r);
        return len;
    }
    uint64_t prev;
    memcpy(&prev, r->mem + off + 8, sizeof(prev));
    uint64_t prev_end = prev + rec_size(rec_len(r, prev));
    r->used -= rec_size(len);
    if (off == 0) r->used -= r->cap - prev_end; /* it had wrapped: the gap after prev goes too */
    r->head = prev_end;
    r->last = prev;
    if (r->pkts == 0) r->deq = r->head;
    return len;
}

static void ring_free(dp_ring *r, uint64_t off, uint32_t len) {
    if (off != r->tail) r->used -= r->cap - r->tail; /* the record wrapped: the gap goes too */
    r->tail = off + rec_size(len);
    r->used -= rec_size(len);
    if (r->used == 0) ring_reset(r);
}

static inline uint32_t rng32(dp_egress *e) {
    uint64_t x = e->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    e->rng = x;
    return (uint32_t)((x * 0x2545F4914F6CDD1DULL) >> 32);
}

int dp_egress_init(dp_egress *e, uint16_t port, uint64_t buffer, uint32_t max_frame) {
    memset(e, 0, sizeof(*e));
    e->port = port;
    e->buffer = buffer;
    e->rng = 0x9E3779B97F4A7C15ULL ^ port;
    /* queued bytes <= buffer, bytes on the line <= buffer (+ one frame), plus a wrap gap */
    uint64_t cap = 2 * buffer + 3 * rec_size(max_frame);
    cap = (cap + 7) & ~(uint64_t)7;
    for (int q = 0; q < DP_NUM_QUEUES; q++) {
        ring_reset(&e->q[q]);
        e->q[q].cap = cap;
        e->q[q].mem = malloc(cap);
        if (e->q[q].mem == NULL) {
            dp_egress_free(e);
            return -1;
        }
    }
    e->line = calloc(DP_LINE_CAP, sizeof(dp_line_desc));
    if (e->line == NULL) {
        dp_egress_free(e);
        return -1;
    }
    return 0;
}

void dp_egress_free(dp_egress *e) {
    for (int q = 0; q < DP_NUM_QUEUES; q++) {
        free(e->q[q].mem);
        e->q[q].mem = NULL;
    }
    free(e->line);
    e->line = NULL;
}

void dp_egress_set_shaper(dp_egress *e, uint64_t rate_bps, uint64_t burst_bytes, uint64_t now) {
    e->rate_bps = rate_bps;
    e->burst = (double)burst_bytes;
    e->tokens = (double)burst_bytes;
    e->last_ns = now;
}

void dp_egress_clear(dp_egress *e, uint32_t *occupancy) {
    for (int q = 0; q < DP_NUM_QUEUES; q++) {
        dp_ring *r = &e->q[q];
        ring_reset(r);
        r->bytes = 0;
        r->pkts = 0;
        occupancy[((uint32_t)e->port << DLCP_CLASS_BITS) | (uint32_t)q] = 0;
        e->stats.cls[q].depth = 0;
        e->stats.cls[q].depth_bytes = 0;
    }
    e->queued = e->inflight = 0;
    e->line_head = e->line_tail = 0;
}

int dp_egress_enqueue(dp_egress *e, const uint8_t *frame, uint32_t len, int queue, uint32_t *occupancy) {
    dp_class_stats *cs = &e->stats.cls[queue];
    dp_ring *r = &e->q[queue];
    while (e->queued + len > e->buffer) { /* push out the newest frames of the lowest class below this one */
        int victim = -1;
        for (int q = 0; q < queue; q++) {
            if (e->q[q].pkts != 0) {
                victim = q;
                break;
            }
        }
        if (victim < 0) break;
        dp_ring *vr = &e->q[victim];
        uint32_t vlen = ring_pop_newest(vr);
        e->queued -= vlen;
        occupancy[((uint32_t)e->port << DLCP_CLASS_BITS) | (uint32_t)victim]--;
        dp_class_stats *vs = &e->stats.cls[victim];
        vs->dropped[DP_DROP_PUSHED_OUT]++;
        vs->depth = vr->pkts;
        vs->depth_bytes = vr->bytes;
    }
    if (e->queued + len > e->buffer || ring_write(r, frame, len) < 0) {
        cs->dropped[DP_DROP_BUFFER]++;
        return DP_DROP_BUFFER;
    }
    r->pkts++;
    r->bytes += len;
    e->queued += len;
    occupancy[((uint32_t)e->port << DLCP_CLASS_BITS) | (uint32_t)queue]++;
    cs->enqueued++;
    cs->enqueued_bytes += len;
    cs->depth = r->pkts;
    cs->depth_bytes = r->bytes;
    if (r->pkts > cs->depth_hwm) cs->depth_hwm = r->pkts;
    if (r->bytes > cs->depth_bytes_hwm) cs->depth_bytes_hwm = r->bytes;
    if (e->queued > e->stats.buffer_hwm) e->stats.buffer_hwm = e->queued;
    return DP_OK;
}

static inline void lower(uint64_t *next_event, uint64_t t) {
    if (next_event != NULL && t < *next_event) *next_event = t;
}

uint32_t dp_egress_schedule(dp_egress *e, uint64_t now, uint32_t *occupancy, dp_counter *forwarded,
                            uint64_t *next_event) {
    uint32_t moved = 0;
    if (e->rate_bps != 0 && now > e->last_ns) {
        e->tokens += (double)(now - e->last_ns) * (double)e->rate_bps / 8e9;
        if (e->tokens > e->burst) e->tokens = e->burst;
        e->last_ns = now;
    }
    for (;;) {
        int q = -1;
        for (int i = DP_NUM_QUEUES - 1; i >= 0; i--) {
            if (e->q[i].pkts != 0 && !((e->paused >> i) & 1)) {
                q = i;
                break;
            }
        }
        if (q < 0) break;
        if (e->line_head - e->line_tail >= DP_LINE_CAP) break; /* resumes when the line drains */
        if (e->rate_bps != 0 && e->tokens < 0) {
            lower(next_event, now + (uint64_t)ceil(-e->tokens * 8e9 / (double)e->rate_bps));
            break;
        }
        dp_ring *r = &e->q[q];
        uint64_t off = rec_start(r, r->deq);
        uint32_t len = rec_len(r, off);
        if (e->inflight > 0 && e->inflight + len > e->buffer) break; /* resumes when the line drains */
        r->deq = off + rec_size(len);
        r->pkts--;
        r->bytes -= len;
        e->queued -= len;
        uint32_t slot = ((uint32_t)e->port << DLCP_CLASS_BITS) | (uint32_t)q;
        occupancy[slot]--;
        dp_class_stats *cs = &e->stats.cls[q];
        cs->depth = r->pkts;
        cs->depth_bytes = r->bytes;
        e->inflight += len;
        forwarded->packets[slot]++;
        forwarded->bytes[slot] += len;
        if (e->rate_bps != 0) e->tokens -= (double)(len + DP_WIRE_OVERHEAD);
        dp_line_desc *d = &e->line[e->line_head & (DP_LINE_CAP - 1)];
        d->due = now + e->delay_ns;
        d->off = off;
        d->len = len;
        d->queue = (uint8_t)q;
        d->lost = e->loss[q] != 0 && (uint64_t)rng32(e) < e->loss[q];
        if (d->lost) cs->dropped[DP_DROP_LOSS]++;
        e->line_head++;
        moved++;
    }
    return moved;
}

static void line_pop(dp_egress *e) {
    dp_line_desc *d = &e->line[e->line_tail & (DP_LINE_CAP - 1)];
    ring_free(&e->q[d->queue], d->off, d->len);
    e->inflight -= d->len;
    e->line_tail++;
}

uint32_t dp_egress_due(dp_egress *e, uint64_t now, dp_tx_frame *out, uint32_t max, uint64_t *next_event) {
    while (e->line_tail != e->line_head && e->line[e->line_tail & (DP_LINE_CAP - 1)].lost) line_pop(e);
    uint32_t n = 0;
    for (uint32_t i = e->line_tail; i != e->line_head && n < max; i++) {
        const dp_line_desc *d = &e->line[i & (DP_LINE_CAP - 1)];
        if (d->lost) break;
        if (d->due > now) {
            lower(next_event, d->due);
            break;
        }
        out[n].data = e->q[d->queue].mem + d->off + DP_REC_HEADER;
        out[n].len = d->len;
        n++;
    }
    return n;
}

void dp_egress_sent(dp_egress *e, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        const dp_line_desc *d = &e->line[e->line_tail & (DP_LINE_CAP - 1)];
        dp_class_stats *cs = &e->stats.cls[d->queue];
        cs->sent++;
        cs->sent_bytes += d->len;
        line_pop(e);
    }
}

void dp_egress_failed(dp_egress *e) {
    const dp_line_desc *d = &e->line[e->line_tail & (DP_LINE_CAP - 1)];
    e->stats.cls[d->queue].dropped[DP_DROP_TX_ERROR]++;
    line_pop(e);
}

int dp_egress_line_empty(const dp_egress *e) { return e->line_head == e->line_tail; }
