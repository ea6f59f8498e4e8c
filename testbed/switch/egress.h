/* Egress of one switch port: 8 strict-priority queues sharing a byte buffer, a token-bucket
 * shaper, random loss and a fixed delay (impairments), and per-class statistics.
 *
 * No sockets: the caller enqueues frames the pipeline forwarded, calls dp_egress_schedule()
 * to move frames from the queues to the port's transmit line (strict priority, as the
 * shaper allows), and takes due frames from the line with dp_egress_due() to send them.
 *
 * Buffer: shared by the 8 queues. When it is full, an arriving frame pushes out the newest
 * frames of lower classes (lowest first) to make room, or is dropped if there are none:
 * under overload a higher class keeps its share of the buffer as it keeps its share of the link.
 *
 * Storage: each queue is a byte ring (frames copied in at enqueue, never allocated per
 * packet). A frame stays in its ring until it has been sent, so the line (frames dequeued
 * but delayed or not yet sent) holds only descriptors. Queued bytes across the 8 queues
 * are limited by the buffer; bytes on the line by the buffer too (with a delay, at most one
 * buffer's worth is in flight on the emulated link).
 */
#ifndef DLCP_EGRESS_H
#define DLCP_EGRESS_H

#include <stdint.h>

#include "pipeline.h"

#define DP_LINE_CAP 8192u          /* descriptors on a port's transmit line (power of two) */
#define DP_WIRE_OVERHEAD 24u       /* preamble + start delimiter 8, FCS 4, inter-frame gap 12 */
#define DP_REC_HEADER 16u         /* u32 length, u32 unused, u64 offset of the previous record */
#define DP_NO_REC UINT64_MAX

typedef struct {
    uint8_t *mem;
    uint64_t cap;       /* bytes */
    uint64_t head;      /* next write */
    uint64_t tail;      /* oldest record not yet freed */
    uint64_t deq;       /* next record to dequeue */
    uint64_t used;      /* bytes between tail and head, wrap gap included */
    uint64_t last;      /* newest record (DP_NO_REC: none) */
    uint32_t pkts;      /* queued: enqueued, not yet dequeued */
    uint64_t bytes;     /* frame bytes queued */
} dp_ring;

typedef struct {
    uint64_t due;       /* ns: may be sent from then on */
    uint64_t off;       /* record offset in its queue's ring */
    uint32_t len;
    uint8_t queue;
    uint8_t lost;       /* loss impairment: freed, not sent */
} dp_line_desc;

typedef struct {
    uint64_t enqueued, enqueued_bytes;
    uint64_t sent, sent_bytes;
    uint64_t trimmed;                  /* trimmed on the way into this (port, class) */
    uint64_t dropped[DP_NUM_REASONS];  /* selective, buffer, loss, tx_error */
    uint32_t depth, depth_hwm;         /* packets */
    uint64_t depth_bytes, depth_bytes_hwm;
} dp_class_stats;

typedef struct {
    uint64_t rx, rx_bytes;
    uint64_t rx_dropped[DP_NUM_REASONS]; /* ingress drops of frames that arrived on this port */
    uint64_t buffer_hwm;                 /* bytes queued over all classes */
    dp_class_stats cls[DP_NUM_QUEUES];
} dp_port_stats;

typedef struct {
    uint16_t port;
    uint64_t buffer;          /* bytes */
    uint64_t queued;          /* bytes queued, all classes */
    uint64_t inflight;        /* bytes on the line */
    dp_ring q[DP_NUM_QUEUES];
    uint8_t paused;           /* bit per queue: not served (tests stall queues this way) */
    /* shaper: rate 0 = unlimited */
    uint64_t rate_bps;
    double tokens, burst;     /* bytes */
    uint64_t last_ns;
    /* impairments */
    uint64_t delay_ns;
    uint64_t loss[DP_NUM_QUEUES]; /* drop when a 32-bit random draw is below this (1 << 32: always) */
    uint64_t rng;
    /* transmit line */
    dp_line_desc *line;
    uint32_t line_head, line_tail;
    dp_port_stats stats;
} dp_egress;

/* A frame on the line, ready to send. */
typedef struct {
    const uint8_t *data;
    uint32_t len;
} dp_tx_frame;

int dp_egress_init(dp_egress *e, uint16_t port, uint64_t buffer, uint32_t max_frame);
void dp_egress_free(dp_egress *e);
void dp_egress_set_shaper(dp_egress *e, uint64_t rate_bps, uint64_t burst_bytes, uint64_t now);
/* Empty queues and line (counts nothing) and reset the occupancy slots. */
void dp_egress_clear(dp_egress *e, uint32_t *occupancy);

/* DP_OK, or DP_DROP_BUFFER (counted here). Frames pushed out are counted as DP_DROP_PUSHED_OUT. */
int dp_egress_enqueue(dp_egress *e, const uint8_t *frame, uint32_t len, int queue, uint32_t *occupancy);
/* Moves frames from the queues to the line; returns how many. *next_event (ns) is lowered to
 * when the port next has work, if that is in the future. */
uint32_t dp_egress_schedule(dp_egress *e, uint64_t now, uint32_t *occupancy, dp_counter *forwarded,
                            uint64_t *next_event);
/* Up to `max` frames at the head of the line that are due; they stay there until completed. */
uint32_t dp_egress_due(dp_egress *e, uint64_t now, dp_tx_frame *out, uint32_t max, uint64_t *next_event);
/* The first `n` frames returned by dp_egress_due() were sent. */
void dp_egress_sent(dp_egress *e, uint32_t n);
/* The first frame returned by dp_egress_due() was refused by the kernel: drop it. */
void dp_egress_failed(dp_egress *e);
int dp_egress_line_empty(const dp_egress *e);

#endif /* DLCP_EGRESS_H */
