/* The DLCP P4 pipeline in C; see pipeline.h. Each step names the P4 control it mirrors. */
#include "pipeline.h"

#include <string.h>

static uint32_t crc32_table[256];

static void crc32_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc32_table[i] = c;
    }
}

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* ---------------------------------------------------------------- tables */

void dp_tables_init(dp_tables *t) {
    if (crc32_table[1] == 0) crc32_init();
    memset(t, 0, sizeof(*t));
    /* node 0 is the root; the rest form the free list */
    t->lpm[0].child[0] = t->lpm[0].child[1] = -1;
    for (int i = 1; i < LPM_MAX_NODES; i++) {
        t->lpm[i].child[0] = (i + 1 < LPM_MAX_NODES) ? i + 1 : -1;
        t->lpm[i].child[1] = -1;
    }
    t->lpm_free = 1;
    t->route_default_action = ROUTE_DROP;
    t->class_default_action = CLASS_USE_PRIORITY;
    t->threshold_default_action = CONGESTION_ADMIT;
}

static int lpm_alloc(dp_tables *t) {
    int n = t->lpm_free;
    if (n < 0) return -1;
    t->lpm_free = t->lpm[n].child[0];
    memset(&t->lpm[n], 0, sizeof(t->lpm[n]));
    t->lpm[n].child[0] = t->lpm[n].child[1] = -1;
    return n;
}

static int valid_prefix(uint32_t prefix, int plen) {
    if (plen < 0 || plen > 32) return 0;
    return plen == 32 || (prefix & (0xFFFFFFFFu >> plen)) == 0;
}

/* The node of (prefix, plen), or -1; with `create`, the missing nodes are made. */
static int lpm_find(dp_tables *t, uint32_t prefix, int plen, int create) {
    int n = 0;
    for (int d = 0; d < plen; d++) {
        int bit = (prefix >> (31 - d)) & 1;
        int c = t->lpm[n].child[bit];
        if (c < 0) {
            if (!create) return -1;
            c = lpm_alloc(t);
            if (c < 0) return -1;
            t->lpm[n].child[bit] = c;
        }
        n = c;
    }
    return n;
}

int dp_route_insert(dp_tables *t, uint32_t prefix, int plen, int action, uint16_t group) {
    if (!valid_prefix(prefix, plen) || (action != ROUTE_DROP && action != ROUTE_GROUP)) return DP_E_INVALID;
    int n = lpm_find(t, prefix, plen, 0);
    if (n >= 0 && t->lpm[n].has_route) return DP_E_EXISTS;
    if (t->n_routes >= IPV4_ROUTES_SIZE) return DP_E_FULL;
    /* at most 32 new nodes: checked by walking the free list first, so a failure changes nothing */
    int need = 0, m = 0;
    for (int d = 0; d < plen && m >= 0; d++) {
        m = t->lpm[m].child[(prefix >> (31 - d)) & 1];
        if (m < 0) need = plen - d;
    }
    int f = t->lpm_free, have = 0;
    while (f >= 0 && have < need) {
        f = t->lpm[f].child[0];
        have++;
    }
    if (have < need) return DP_E_FULL;
    n = lpm_find(t, prefix, plen, 1);
    t->lpm[n].has_route = 1;
    t->lpm[n].action = (uint8_t)action;
    t->lpm[n].group = group;
    t->n_routes++;
    return DP_E_OK;
}

int dp_route_modify(dp_tables *t, uint32_t prefix, int plen, int action, uint16_t group) {
    if (!valid_prefix(prefix, plen) || (action != ROUTE_DROP && action != ROUTE_GROUP)) return DP_E_INVALID;
    int n = lpm_find(t, prefix, plen, 0);
    if (n < 0 || !t->lpm[n].has_route) return DP_E_MISSING;
    t->lpm[n].action = (uint8_t)action;
    t->lpm[n].group = group;
    return DP_E_OK;
}

int dp_route_delete(dp_tables *t, uint32_t prefix, int plen) {
    if (!valid_prefix(prefix, plen)) return DP_E_INVALID;
    int path[33];
    int n = 0;
    path[0] = 0;
    for (int d = 0; d < plen; d++) {
        n = t->lpm[n].child[(prefix >> (31 - d)) & 1];
        if (n < 0) return DP_E_MISSING;
        path[d + 1] = n;
    }
    if (!t->lpm[n].has_route) return DP_E_MISSING;
    t->lpm[n].has_route = 0;
    t->n_routes--;
    /* prune the nodes left with neither a route nor children, bottom up (never the root) */
    for (int d = plen; d > 0; d--) {
        dp_lpm_node *node = &t->lpm[path[d]];
        if (node->has_route || node->child[0] >= 0 || node->child[1] >= 0) break;
        t->lpm[path[d - 1]].child[(prefix >> (31 - (d - 1))) & 1] = -1;
        node->child[0] = t->lpm_free;
        node->child[1] = -1;
        t->lpm_free = path[d];
    }
    return DP_E_OK;
}

int dp_route_default(dp_tables *t, int action, uint16_t group) {
    if (action != ROUTE_DROP && action != ROUTE_GROUP) return DP_E_INVALID;
    t->route_default_action = (uint8_t)action;
    t->route_default_group = group;
    return DP_E_OK;
}

int dp_member_set(dp_tables *t, int index, int action, uint16_t port, const uint8_t *src_mac,
                  const uint8_t *dst_mac) {
    if (index < 0 || index >= DP_MAX_MEMBERS || (action != MEMBER_SET_NEXT_HOP && action != MEMBER_DROP)
        || port >= DP_NUM_PORTS)
        return DP_E_INVALID;
    dp_member *m = &t->members[index];
    m->used = 1;
    m->action = (uint8_t)action;
    m->port = port;
    memcpy(m->src_mac, src_mac, 6);
    memcpy(m->dst_mac, dst_mac, 6);
    return DP_E_OK;
}

int dp_member_clear(dp_tables *t, int index) {
    if (index < 0 || index >= DP_MAX_MEMBERS) return DP_E_INVALID;
    if (!t->members[index].used) return DP_E_MISSING;
    t->members[index].used = 0;
    return DP_E_OK;
}

int dp_group_set(dp_tables *t, int index, const uint16_t *slots, int n) {
    if (index < 0 || index >= ECMP_GROUPS || n < 0) return DP_E_INVALID;
    if (n > DP_MAX_GROUP_SLOTS) return DP_E_FULL;
    for (int i = 0; i < n; i++)
        if (slots[i] >= DP_MAX_MEMBERS || !t->members[slots[i]].used) return DP_E_INVALID;
    dp_group *g = &t->groups[index];
    g->used = 1;
    g->n = (uint16_t)n;
    memcpy(g->slot, slots, (size_t)n * sizeof(uint16_t));
    return DP_E_OK;
}

int dp_group_clear(dp_tables *t, int index) {
    if (index < 0 || index >= ECMP_GROUPS) return DP_E_INVALID;
    if (!t->groups[index].used) return DP_E_MISSING;
    t->groups[index].used = 0;
    t->groups[index].n = 0;
    return DP_E_OK;
}

int dp_next_hop_set(dp_tables *t, uint16_t group, int kind, uint16_t ref, int insert) {
    if (kind == NH_MEMBER) {
        if (ref >= DP_MAX_MEMBERS || !t->members[ref].used) return DP_E_INVALID;
    } else if (kind == NH_GROUP) {
        if (ref >= ECMP_GROUPS || !t->groups[ref].used) return DP_E_INVALID;
    } else {
        return DP_E_INVALID;
    }
    dp_next_hop *e = &t->next_hops[group];
    if (insert) {
        if (e->kind != NH_NONE) return DP_E_EXISTS;
        if (t->n_next_hops >= ECMP_GROUPS) return DP_E_FULL;
        t->n_next_hops++;
    } else if (e->kind == NH_NONE) {
        return DP_E_MISSING;
    }
    e->kind = (uint8_t)kind;
    e->ref = ref;
    return DP_E_OK;
}

int dp_next_hop_delete(dp_tables *t, uint16_t group) {
    dp_next_hop *e = &t->next_hops[group];
    if (e->kind == NH_NONE) return DP_E_MISSING;
    e->kind = NH_NONE;
    t->n_next_hops--;
    return DP_E_OK;
}

int dp_dlcp_port_set(dp_tables *t, uint16_t port, int present) {
    uint64_t bit = 1ull << (port & 63);
    uint64_t *w = &t->dlcp_ports[port >> 6];
    int has = (*w & bit) != 0;
    if (present) {
        if (has) return DP_E_EXISTS;
        if (t->n_dlcp_ports >= DLCP_PORTS_SIZE) return DP_E_FULL;
        *w |= bit;
        t->n_dlcp_ports++;
    } else {
        if (!has) return DP_E_MISSING;
        *w &= ~bit;
        t->n_dlcp_ports--;
    }
    return DP_E_OK;
}

void dp_dlcp_port_default(dp_tables *t, int mark) { t->dlcp_ports_default_mark = (uint8_t)(mark != 0); }

static int class_action_ok(int action, int queue) {
    return action >= CLASS_USE_PRIORITY && action <= CLASS_MARK_ELIGIBLE && queue >= 0 && queue < DP_NUM_QUEUES;
}

int dp_class_write(dp_tables *t, int op, uint64_t value, uint64_t mask, int32_t priority, int action, int queue) {
    if (op != DP_OP_DELETE && !class_action_ok(action, queue)) return DP_E_INVALID;
    if ((value & ~mask) != 0) return DP_E_INVALID;
    uint32_t n = t->n_classes, i;
    for (i = 0; i < n; i++) {
        dp_class_entry *e = &t->classes[i];
        if (e->value == value && e->mask == mask && e->priority == priority) break;
    }
    if (op == DP_OP_INSERT) {
        if (i < n) return DP_E_EXISTS;
        if (n >= DLCP_CLASSES_SIZE) return DP_E_FULL;
        uint32_t pos = 0;
        while (pos < n && t->classes[pos].priority >= priority) pos++;
        memmove(&t->classes[pos + 1], &t->classes[pos], (n - pos) * sizeof(dp_class_entry));
        dp_class_entry *e = &t->classes[pos];
        e->value = value;
        e->mask = mask;
        e->priority = priority;
        e->seq = t->class_seq++;
        e->action = (uint8_t)action;
        e->queue = (uint8_t)queue;
        t->n_classes = n + 1;
        return DP_E_OK;
    }
    if (i == n) return DP_E_MISSING;
    if (op == DP_OP_MODIFY) {
        t->classes[i].action = (uint8_t)action;
        t->classes[i].queue = (uint8_t)queue;
        return DP_E_OK;
    }
    if (op != DP_OP_DELETE) return DP_E_INVALID;
    memmove(&t->classes[i], &t->classes[i + 1], (n - i - 1) * sizeof(dp_class_entry));
    t->n_classes = n - 1;
    return DP_E_OK;
}

int dp_class_default(dp_tables *t, int action, int queue) {
    if (!class_action_ok(action, queue)) return DP_E_INVALID;
    t->class_default_action = (uint8_t)action;
    t->class_default_queue = (uint8_t)queue;
    return DP_E_OK;
}

int dp_threshold_write(dp_tables *t, int op, int queue, int drop_class, int action, uint32_t threshold) {
    if (queue < 0 || queue >= DP_NUM_QUEUES || drop_class < 0 || drop_class > 255) return DP_E_INVALID;
    if (op != DP_OP_DELETE && (action < CONGESTION_ADMIT || action > CONGESTION_TRIM)) return DP_E_INVALID;
    dp_threshold *e = &t->thresholds[queue][drop_class];
    if (op == DP_OP_INSERT) {
        if (e->used) return DP_E_EXISTS;
        if (t->n_thresholds >= DLCP_DROP_THRESHOLDS_SIZE) return DP_E_FULL;
        t->n_thresholds++;
    } else if (!e->used) {
        return DP_E_MISSING;
    }
    if (op == DP_OP_DELETE) {
        e->used = 0;
        t->n_thresholds--;
        return DP_E_OK;
    }
    e->used = 1;
    e->action = (uint8_t)action;
    e->threshold = threshold;
    return DP_E_OK;
}

int dp_threshold_default(dp_tables *t, int action, uint32_t threshold) {
    if (action < CONGESTION_ADMIT || action > CONGESTION_TRIM) return DP_E_INVALID;
    t->threshold_default_action = (uint8_t)action;
    t->threshold_default = threshold;
    return DP_E_OK;
}

/* ---------------------------------------------------------------- per packet */

uint32_t dp_ecmp_hash(uint32_t src, uint32_t dst, uint8_t proto, uint16_t sport, uint16_t dport, uint32_t entropy) {
    uint8_t b[17] = {
        (uint8_t)(src >> 24), (uint8_t)(src >> 16), (uint8_t)(src >> 8), (uint8_t)src,
        (uint8_t)(dst >> 24), (uint8_t)(dst >> 16), (uint8_t)(dst >> 8), (uint8_t)dst,
        proto,
        (uint8_t)(sport >> 8), (uint8_t)sport,
        (uint8_t)(dport >> 8), (uint8_t)dport,
        (uint8_t)(entropy >> 24), (uint8_t)(entropy >> 16), (uint8_t)(entropy >> 8), (uint8_t)entropy,
    };
    if (crc32_table[1] == 0) crc32_init(); /* called before any table (dataplane.ecmp_hash): 0xFFFFFFFF */
    uint32_t c = 0xFFFFFFFFu;
    for (int i = 0; i < 17; i++) c = crc32_table[(c ^ b[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* common/next_hop.p4 csum16_replace: HC' = ~(~HC + ~m + m') (RFC 1624 eqn. 3). */
static inline uint16_t csum16_replace(uint16_t csum, uint16_t old_word, uint16_t new_word) {
    uint32_t sum = (uint32_t)(uint16_t)~csum + (uint32_t)(uint16_t)~old_word + new_word;
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    return (uint16_t)~sum;
}

static inline void count(dp_counter *c, uint32_t index, uint32_t bytes) {
    c->packets[index]++;
    c->bytes[index] += bytes;
}

#define ETH_OFF 0
#define IP_OFF ETH_HEADER_BYTES
#define L4_OFF (ETH_HEADER_BYTES + IPV4_HEADER_BYTES)
#define DLCP_OFF (L4_OFF + UDP_HEADER_BYTES)

void dp_process(dp_tables *t, uint8_t *f, uint32_t len, const uint32_t *occupancy, dp_verdict *v) {
    memset(v, 0, sizeof(*v));
    v->drop = 1;
    v->len = len;

    /* ---- parser.p4: Ethernet, IPv4; a header the frame is too short for stays invalid ---- */
    if (len < ETH_HEADER_BYTES + IPV4_HEADER_BYTES || be16(f + 12) != ETHERTYPE_IPV4) {
        v->reason = DP_DROP_NOT_IPV4;
        return;
    }
    uint8_t *ip = f + IP_OFF;
    /* ---- routing.p4 ---- */
    if (ip[8] <= 1) {
        v->reason = DP_DROP_TTL;
        return;
    }
    uint32_t dst = be32(ip + 16), src = be32(ip + 12);
    int action = t->route_default_action;
    uint16_t group = t->route_default_group;
    for (int n = 0, d = 0;; d++) {
        const dp_lpm_node *node = &t->lpm[n];
        if (node->has_route) {
            action = node->action;
            group = node->group;
        }
        if (d == 32) break;
        n = node->child[(dst >> (31 - d)) & 1];
        if (n < 0) break;
    }
    if (action != ROUTE_GROUP) {
        v->reason = DP_DROP_NO_ROUTE;
        return;
    }

    /* ---- parser.p4: UDP/TCP only without options or fragments; DLCP in any long-enough datagram ---- */
    int ihl = ip[0] & 0x0F;
    int frag = be16(ip + 6) & 0x1FFF;
    uint8_t proto = ip[9];
    int udp_valid = 0, tcp_valid = 0, dlcp_valid = 0;
    const uint8_t *l4 = f + L4_OFF;
    const uint8_t *dl = f + DLCP_OFF;
    if (ihl == 5 && frag == 0) {
        if (proto == IPPROTO_UDP_NUM && len >= L4_OFF + UDP_HEADER_BYTES) {
            udp_valid = 1;
            if (be16(l4 + 4) >= MIN_DLCP_UDP_LENGTH && len >= DLCP_OFF + DLCP_HEADER_BYTES) dlcp_valid = 1;
        } else if (proto == IPPROTO_TCP_NUM && len >= L4_OFF + 4) {
            tcp_valid = 1;
        }
    }

    /* ---- classification.p4 ---- */
    int is_dlcp = 0, queue = DEFAULT_QUEUE, eligible = 0;
    int ptype = 0, dclass = 0;
    if (dlcp_valid) {
        uint16_t dport = be16(l4 + 2);
        if (dport == DLCP_UDP_PORT)
            is_dlcp = 1;
        else
            is_dlcp = ((t->dlcp_ports[dport >> 6] >> (dport & 63)) & 1) || t->dlcp_ports_default_mark;
        int ver = dl[DLCP_OFF_VER_TYPE] >> DLCP_VERSION_SHIFT;
        ptype = dl[DLCP_OFF_VER_TYPE] & DLCP_TYPE_MASK;
        dclass = dl[DLCP_OFF_DROP_CLASS];
        if (ver != DLCP_VERSION || ptype > DLCP_TYPE_MAX || dl[DLCP_OFF_PRIORITY] >= DLCP_NUM_PRIORITY_CLASSES
            || dclass >= DLCP_NUM_DROP_CLASSES)
            is_dlcp = 0;
    }
    if (is_dlcp) {
        int prio = dl[DLCP_OFF_PRIORITY];
        uint64_t key = dp_class_key(be16(dl + DLCP_OFF_JOB_ID), (uint32_t)ptype, (uint32_t)prio, (uint32_t)dclass,
                                    dl[DLCP_OFF_KIND]);
        int caction = t->class_default_action, cqueue = t->class_default_queue;
        for (uint32_t i = 0; i < t->n_classes; i++) {
            const dp_class_entry *e = &t->classes[i];
            if ((key & e->mask) == e->value) {
                caction = e->action;
                cqueue = e->queue;
                break;
            }
        }
        if (caction == CLASS_USE_PRIORITY) {
            queue = prio & (DP_NUM_QUEUES - 1);
        } else {
            queue = cqueue;
            eligible = caction == CLASS_MARK_ELIGIBLE;
        }
        if (ptype != DLCP_TYPE_DATA || (dl[DLCP_OFF_FLAGS] & DLCP_FLAG_RETX) || dclass == 0) eligible = 0;
        if (ptype == DLCP_TYPE_TRIMMED) queue = TRIM_QUEUE;
    }
    /* classification.p4: seq ^ msg_id for DLCP data (one-packet messages spread too), else 0 */
    uint32_t entropy = (is_dlcp && ptype == DLCP_TYPE_DATA) ? be32(dl + DLCP_OFF_SEQ) ^ be32(dl + DLCP_OFF_MSG_ID) : 0;
    uint16_t sport = 0, dport = 0;
    if (udp_valid || tcp_valid) {
        sport = be16(l4);
        dport = be16(l4 + 2);
    }

    /* ---- ecmp.p4: next_hops with its action selector ---- */
    const dp_next_hop *nh = &t->next_hops[group];
    const dp_member *m = NULL;
    if (nh->kind == NH_MEMBER) {
        m = &t->members[nh->ref];
    } else if (nh->kind == NH_GROUP) {
        const dp_group *g = &t->groups[nh->ref];
        if (g->n > 0) m = &t->members[g->slot[dp_ecmp_hash(src, dst, proto, sport, dport, entropy) % g->n]];
    }
    if (m == NULL || !m->used || m->action != MEMBER_SET_NEXT_HOP) {
        v->reason = DP_DROP_NEXT_HOP;
        return;
    }

    /* ---- next_hop.p4: MACs, TTL, incremental checksum ---- */
    memcpy(f + ETH_OFF, m->dst_mac, 6);
    memcpy(f + ETH_OFF + 6, m->src_mac, 6);
    uint8_t ttl = (uint8_t)(ip[8] - 1);
    put16(ip + 10, csum16_replace(be16(ip + 10), (uint16_t)(ip[8] << 8 | proto), (uint16_t)(ttl << 8 | proto)));
    ip[8] = ttl;

    /* ---- selective_drop.p4 + occupancy.p4 ---- */
    uint32_t port_class = ((uint32_t)m->port << DLCP_CLASS_BITS) | (uint32_t)queue;
    int on_congestion = CONGESTION_ADMIT;
    uint32_t threshold = 0;
    if (eligible) {
        const dp_threshold *th = &t->thresholds[queue][dclass];
        on_congestion = th->used ? th->action : t->threshold_default_action;
        threshold = th->used ? th->threshold : t->threshold_default;
    }
    int congested = on_congestion != CONGESTION_ADMIT && occupancy[port_class] > threshold;
    int trim = congested && on_congestion == CONGESTION_TRIM;

    v->port = m->port;
    v->port_class = (uint16_t)port_class;
    v->queue = (uint8_t)queue;
    /* ---- counters.p4 (DropCounters) ---- */
    if (trim) {
        count(&t->counters[DP_CTR_TRIMMED], port_class, len);
        /* ---- trimming.p4 ---- */
        uint8_t *udp = f + L4_OFF;
        uint8_t *d = f + DLCP_OFF;
        d[DLCP_OFF_VER_TYPE] = (uint8_t)((d[DLCP_OFF_VER_TYPE] & ~DLCP_TYPE_MASK) | DLCP_TYPE_TRIMMED);
        put16(udp + 4, MIN_DLCP_UDP_LENGTH);
        put16(ip + 10, csum16_replace(be16(ip + 10), be16(ip + 2), TRIMMED_IPV4_TOTAL_LEN));
        put16(ip + 2, TRIMMED_IPV4_TOTAL_LEN);
        put16(udp + 6, 0);
        v->len = TRIMMED_FRAME_BYTES;
        v->queue = TRIM_QUEUE;
        v->trimmed = 1;
    } else if (congested) {
        count(&t->counters[DP_CTR_DROPPED], port_class, len);
        v->reason = DP_DROP_SELECTIVE;
        return;
    }
    v->drop = 0;
    v->reason = DP_OK;
}

const char *dp_reason_name(int reason) {
    static const char *names[DP_NUM_REASONS] = {
        "ok", "not_ipv4", "ttl", "no_route", "next_hop", "selective", "buffer", "pushed_out", "loss", "no_port",
        "oversize", "tx_error",
    };
    return (reason >= 0 && reason < DP_NUM_REASONS) ? names[reason] : "?";
}
