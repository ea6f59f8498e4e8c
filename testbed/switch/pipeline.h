/* The DLCP P4 pipeline (p4src/v1model) in C: tables and the per-packet ingress.
 *
 * No sockets, no threads, no allocation per packet: dp_process() takes one frame
 * in a caller's buffer, rewrites it in place and says where it goes. The egress
 * side (queues, shaping, impairments) is egress.h; the socket side is ports.h.
 * A fuzz harness links this file (and egress.c) alone.
 *
 * Tables are plain structs owned by the caller; the caller serialises writers
 * and readers (switch.c holds one mutex around both).
 */
#ifndef DLCP_PIPELINE_H
#define DLCP_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "dlcp_constants.h"

#define DP_NUM_PORTS (1 << DLCP_PORT_BITS)
#define DP_NUM_QUEUES (1 << DLCP_CLASS_BITS)

/* ---- verdicts and drop reasons ---- */
enum dp_reason {
    DP_OK = 0,
    DP_DROP_NOT_IPV4,     /* routing: no IPv4 header */
    DP_DROP_TTL,          /* routing: TTL 0 or 1 */
    DP_DROP_NO_ROUTE,     /* ipv4_routes: drop_packet (miss or entry) */
    DP_DROP_NEXT_HOP,     /* next_hops: miss, empty group, or drop_packet */
    DP_DROP_SELECTIVE,    /* selective drop: eligible and above the threshold (P4 counter `dropped`) */
    DP_DROP_BUFFER,       /* egress buffer full, no lower class to push out (tail drop) */
    DP_DROP_PUSHED_OUT,   /* queued, then pushed out of a full buffer by a higher class */
    DP_DROP_LOSS,         /* loss impairment */
    DP_DROP_NO_PORT,      /* the next hop names a port the switch does not have */
    DP_DROP_OVERSIZE,     /* bigger than the receive ring or the switch's largest frame */
    DP_DROP_TX_ERROR,     /* the kernel refused the frame on send */
    DP_NUM_REASONS
};

typedef struct {
    uint8_t drop;       /* 1: dropped (reason says why), 0: forward */
    uint8_t reason;     /* enum dp_reason */
    uint8_t queue;      /* egress queue (TRIM_QUEUE once trimmed) */
    uint8_t trimmed;
    uint16_t port;      /* egress port */
    uint16_t port_class;/* port << CLASS_BITS | queue before trimming: index of dropped/trimmed */
    uint32_t len;       /* frame length after processing */
} dp_verdict;

/* ---- tables ---- */
enum { ROUTE_DROP = 0, ROUTE_GROUP = 1 };
enum { NH_NONE = 0, NH_MEMBER = 1, NH_GROUP = 2 };
enum { MEMBER_SET_NEXT_HOP = 0, MEMBER_DROP = 1 };
enum { CLASS_USE_PRIORITY = 0, CLASS_SET_QUEUE = 1, CLASS_MARK_ELIGIBLE = 2 };
enum { CONGESTION_ADMIT = 0, CONGESTION_DROP = 1, CONGESTION_TRIM = 2 };

#define LPM_MAX_NODES (IPV4_ROUTES_SIZE * 32 + 1)
/* The selector's size bounds the members; a group may hold each of them (weights expand it). */
#define DP_MAX_MEMBERS NEXT_HOPS_SIZE
#define DP_MAX_GROUP_SLOTS NEXT_HOPS_SIZE

typedef struct {
    int32_t child[2];   /* node index, -1: none (child[0] links the free list) */
    uint8_t has_route;
    uint8_t action;     /* ROUTE_* */
    uint16_t group;
} dp_lpm_node;

typedef struct {
    uint8_t used;
    uint8_t action;     /* MEMBER_* */
    uint16_t port;
    uint8_t src_mac[6];
    uint8_t dst_mac[6];
} dp_member;

typedef struct {
    uint8_t used;
    uint16_t n;                          /* selection slots (sum of weights) */
    uint16_t slot[DP_MAX_GROUP_SLOTS];   /* member index per selection slot */
} dp_group;

typedef struct {
    uint8_t kind;       /* NH_* */
    uint16_t ref;       /* member or group index */
} dp_next_hop;

typedef struct {
    uint64_t value, mask;  /* dp_class_key() layout */
    int32_t priority;      /* P4Runtime: higher wins */
    uint32_t seq;          /* insertion order: among equal priorities the older wins */
    uint8_t action;        /* CLASS_* */
    uint8_t queue;
} dp_class_entry;

typedef struct {
    uint8_t used;
    uint8_t action;     /* CONGESTION_* */
    uint32_t threshold;
} dp_threshold;

typedef struct {
    uint64_t packets[PORT_CLASS_SLOTS];
    uint64_t bytes[PORT_CLASS_SLOTS];
} dp_counter;

/* The P4 program's counters (p4src/v1model/counters.p4), in dlcp.p4.names.COUNTERS order. */
enum { DP_CTR_FORWARDED = 0, DP_CTR_DROPPED = 1, DP_CTR_TRIMMED = 2, DP_NUM_COUNTERS };

typedef struct {
    /* ipv4_routes (LPM: a binary trie, lookup in O(prefix length)) */
    dp_lpm_node lpm[LPM_MAX_NODES];
    int32_t lpm_free;
    uint32_t n_routes;
    uint8_t route_default_action;
    uint16_t route_default_group;
    /* next_hops (exact on the 16-bit group: a direct index) and the action selector */
    dp_next_hop next_hops[1 << 16];
    uint32_t n_next_hops;
    dp_member members[DP_MAX_MEMBERS];
    dp_group groups[ECMP_GROUPS];
    /* dlcp_ports (exact on the 16-bit port: a bitmap) */
    uint64_t dlcp_ports[(1 << 16) / 64];
    uint32_t n_dlcp_ports;
    uint8_t dlcp_ports_default_mark;
    /* dlcp_classes (ternary: entries kept sorted, best first) */
    dp_class_entry classes[DLCP_CLASSES_SIZE];
    uint32_t n_classes;
    uint32_t class_seq;
    uint8_t class_default_action;
    uint8_t class_default_queue;
    /* dlcp_drop_thresholds (exact on queue and drop class: a direct index) */
    dp_threshold thresholds[DP_NUM_QUEUES][256];
    uint32_t n_thresholds;
    uint8_t threshold_default_action;
    uint32_t threshold_default;
    /* counters */
    dp_counter counters[DP_NUM_COUNTERS];
} dp_tables;

/* Table errors (returned by the writers): */
enum { DP_E_OK = 0, DP_E_FULL = -1, DP_E_EXISTS = -2, DP_E_MISSING = -3, DP_E_INVALID = -4 };

void dp_tables_init(dp_tables *t);

int dp_route_insert(dp_tables *t, uint32_t prefix, int plen, int action, uint16_t group);
int dp_route_modify(dp_tables *t, uint32_t prefix, int plen, int action, uint16_t group);
int dp_route_delete(dp_tables *t, uint32_t prefix, int plen);
int dp_route_default(dp_tables *t, int action, uint16_t group);

int dp_member_set(dp_tables *t, int index, int action, uint16_t port, const uint8_t *src_mac, const uint8_t *dst_mac);
int dp_member_clear(dp_tables *t, int index);
/* Members in selection order (each repeated by its weight); every index must be a used member. */
int dp_group_set(dp_tables *t, int index, const uint16_t *slots, int n);
int dp_group_clear(dp_tables *t, int index);
int dp_next_hop_set(dp_tables *t, uint16_t group, int kind, uint16_t ref, int insert);
int dp_next_hop_delete(dp_tables *t, uint16_t group);

int dp_dlcp_port_set(dp_tables *t, uint16_t port, int present);
void dp_dlcp_port_default(dp_tables *t, int mark);

/* Where each key of dlcp_classes sits in the 64-bit key (the Python module exports these, in the
 * P4Info's key order; a test checks that each key's P4Info width fits its slot). */
#define DP_CLASS_SHIFT_JOB_ID 32
#define DP_CLASS_SHIFT_PACKET_TYPE 24
#define DP_CLASS_SHIFT_PRIORITY 16
#define DP_CLASS_SHIFT_DROP_CLASS 8
#define DP_CLASS_SHIFT_KIND 0
static inline uint64_t dp_class_key(uint32_t job_id, uint32_t packet_type, uint32_t priority, uint32_t drop_class,
                                    uint32_t kind) {
    return ((uint64_t)job_id << DP_CLASS_SHIFT_JOB_ID) | ((uint64_t)packet_type << DP_CLASS_SHIFT_PACKET_TYPE)
           | ((uint64_t)priority << DP_CLASS_SHIFT_PRIORITY) | ((uint64_t)drop_class << DP_CLASS_SHIFT_DROP_CLASS)
           | ((uint64_t)kind << DP_CLASS_SHIFT_KIND);
}
int dp_class_write(dp_tables *t, int op, uint64_t value, uint64_t mask, int32_t priority, int action, int queue);
int dp_class_default(dp_tables *t, int action, int queue);
enum { DP_OP_INSERT = 0, DP_OP_MODIFY = 1, DP_OP_DELETE = 2 };

int dp_threshold_write(dp_tables *t, int op, int queue, int drop_class, int action, uint32_t threshold);
int dp_threshold_default(dp_tables *t, int action, uint32_t threshold);

/* The ECMP hash: CRC32 (as zlib) over src, dst, protocol, L4 ports and entropy, big-endian, as
 * the v1model action selector's field list. */
uint32_t dp_ecmp_hash(uint32_t src, uint32_t dst, uint8_t proto, uint16_t sport, uint16_t dport, uint32_t entropy);

/* One frame through ingress: parse, route, classify, ECMP, next-hop rewrite, selective drop,
 * trim, and the `dropped`/`trimmed` counters. `occupancy[port_class]` is the number of packets
 * in each egress queue. The frame is rewritten in place (never grown); v->len is its new length. */
void dp_process(dp_tables *t, uint8_t *frame, uint32_t len, const uint32_t *occupancy, dp_verdict *v);

const char *dp_reason_name(int reason);

#endif /* DLCP_PIPELINE_H */
