/* Fuzz harness for the software switch's data plane, built with ASan + UBSan by
 * tests/switch/test_fuzz.py. Links pipeline.c, egress.c and switch.c (virtual ports:
 * no socket is opened) and drives random and mutated frames through ingress, the
 * egress queues, the shaper and the impairments on a virtual clock, with the tables
 * rewritten now and then.
 *
 * usage: fuzz_pipeline FRAMES SEED [overflow]
 * (`overflow` reads one byte past a frame: the test checks that the sanitizers report it)
 * Prints one line `frames=... forwarded=... dropped=... sent=...` and exits 0 when every
 * frame was forwarded or counted as dropped and the counters add up; 1 otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "switch.h"

#define MAX_FRAME 9216
#define NPORTS 4 /* ports 1..4; next hops also name port 5, which does not exist */

static uint64_t rng_state;
static uint64_t rnd(void) {
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545F4914F6CDD1DULL;
}
static uint32_t below(uint32_t n) { return n ? (uint32_t)(rnd() % n) : 0; }

static void put16(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}
static void put32(uint8_t *p, uint32_t v) {
    put16(p, v >> 16);
    put16(p + 2, v);
}

static const uint32_t prefixes[] = {0x0A000000, 0x0A010000, 0x0A010100, 0xC0A80000, 0x00000000};
static const int plens[] = {8, 16, 24, 16, 0};

static void fill_tables(dp_tables *t) {
    dp_tables_init(t);
    for (int i = 0; i < 5; i++)
        if (below(5)) dp_route_insert(t, prefixes[i], plens[i], below(8) ? ROUTE_GROUP : ROUTE_DROP, (uint16_t)below(6));
    uint8_t mac[6] = {2, 0xdc, 0, 0, 0, 1};
    for (int m = 0; m < 8; m++) dp_member_set(t, m, below(10) ? MEMBER_SET_NEXT_HOP : MEMBER_DROP, (uint16_t)(1 + below(5)), mac, mac);
    for (int g = 0; g < 4; g++) {
        uint16_t slots[16];
        int n = below(8) ? 1 + (int)below(8) : 0;
        for (int i = 0; i < n; i++) slots[i] = (uint16_t)below(8);
        dp_group_set(t, g, slots, n);
    }
    for (uint16_t grp = 0; grp < 6; grp++) {
        if (!below(8)) continue;
        if (below(3))
            dp_next_hop_set(t, grp, NH_GROUP, (uint16_t)below(4), 1);
        else
            dp_next_hop_set(t, grp, NH_MEMBER, (uint16_t)below(8), 1);
    }
    dp_dlcp_port_set(t, 4791, 1);
    if (!below(4)) dp_dlcp_port_default(t, 1);
    for (int i = 0; i < 12; i++) {
        uint64_t mask = dp_class_key(below(2) ? 0xFFFF : 0, below(2) ? 0xF : 0, below(2) ? 0xFF : 0,
                                     below(2) ? 0xFF : 0, below(2) ? 0xFF : 0);
        uint64_t value = dp_class_key(below(3), below(6), below(9), below(5), below(5)) & mask;
        dp_class_write(t, DP_OP_INSERT, value, mask, (int32_t)below(100), (int)below(3), (int)below(8));
    }
    dp_class_default(t, below(3) ? CLASS_MARK_ELIGIBLE : (int)below(3), (int)below(8));
    for (int q = 0; q < 8; q++)
        for (int d = 1; d < 4; d++)
            if (below(3)) dp_threshold_write(t, DP_OP_INSERT, q, d, (int)below(3), below(6));
    dp_threshold_default(t, (int)below(3), below(4));
    /* and some deletes, so the trie is pruned and entries shift */
    if (below(2)) {
        int i = (int)below(5);
        dp_route_delete(t, prefixes[i], plens[i]);
    }
    if (!below(2)) dp_class_write(t, DP_OP_DELETE, t->classes[0].value, t->classes[0].mask, t->classes[0].priority, 0, 0);
    if (!below(2)) dp_group_clear(t, (int)below(4));
}

/* A frame: valid Ethernet/IPv4/UDP/DLCP, then perhaps broken. */
static uint32_t make_frame(uint8_t *f, uint64_t n) {
    uint32_t kind = below(100);
    uint32_t len;
    if (kind < 20) { /* random bytes, any length (jumbo and runt, past the largest frame too) */
        len = below(8) ? below(300) : below(MAX_FRAME + 200);
        for (uint32_t i = 0; i < len; i++) f[i] = (uint8_t)rnd();
        if (below(2) && len >= 14) put16(f + 12, 0x0800);
        return len;
    }
    uint32_t payload = below(16) ? below(1400) : below(MAX_FRAME - 82);
    len = 82 + payload;
    memset(f, 0, 82);
    for (int i = 0; i < 12; i++) f[i] = (uint8_t)rnd();
    put16(f + 12, 0x0800);
    uint8_t *ip = f + 14;
    ip[0] = 0x45;
    put16(ip + 2, len - 14);
    ip[8] = (uint8_t)(1 + below(64));
    ip[9] = below(10) ? 17 : (below(2) ? 6 : (uint8_t)rnd());
    put32(ip + 12, (uint32_t)rnd());
    put32(ip + 16, prefixes[below(5)] | (below(2) ? (uint32_t)rnd() & 0xFFFF : 0));
    uint8_t *udp = f + 34;
    put16(udp, (uint32_t)rnd());
    put16(udp + 2, below(4) ? 19110 : (below(2) ? 4791 : (uint32_t)rnd()));
    put16(udp + 4, len - 34);
    uint8_t *d = f + 42;
    d[0] = (uint8_t)((below(10) ? 1 : below(16)) << 4 | (below(10) ? 0 : below(16)));
    d[1] = (uint8_t)below(5);
    put16(d + 4, below(3));
    d[28] = (uint8_t)(below(4) ? 0 : below(16));
    d[29] = (uint8_t)below(10);
    d[30] = (uint8_t)below(5);
    put32(d + 32, (uint32_t)n);
    for (uint32_t i = 82; i < len; i++) f[i] = (uint8_t)i;
    if (kind < 60) {
        switch (below(8)) {
        case 0: len = below(len + 1); break;                        /* truncated anywhere */
        case 1: put16(f + 12, (uint32_t)(n & 0xFFFF)); break;        /* every ethertype in turn */
        case 2: put16(ip + 2, (uint32_t)rnd()); put16(udp + 4, (uint32_t)rnd()); break; /* wrong lengths */
        case 3: ip[0] = (uint8_t)rnd(); break;                       /* version / IHL */
        case 4: put16(ip + 6, (uint32_t)rnd()); break;               /* fragments */
        case 5: put16(udp + 4, below(60)); break;                    /* UDP too short for DLCP */
        default: {
            uint32_t flips = 1 + below(8);
            for (uint32_t i = 0; i < flips && len > 0; i++) f[below(len)] ^= (uint8_t)(1u << below(8));
        }
        }
    }
    return len;
}

static uint64_t sent_frames, sent_bad;
static uint64_t p4_fwd, p4_drop, p4_trim; /* P4 counters, summed before each table reset */

static void add_p4_counters(const dp_tables *t) {
    for (int i = 0; i < PORT_CLASS_SLOTS; i++) {
        p4_fwd += t->counters[DP_CTR_FORWARDED].packets[i];
        p4_drop += t->counters[DP_CTR_DROPPED].packets[i];
        p4_trim += t->counters[DP_CTR_TRIMMED].packets[i];
    }
}
static void out(void *ctx, uint16_t port, const uint8_t *data, uint32_t len) {
    (void)ctx;
    (void)port;
    sent_frames++;
    /* only routed IPv4 leaves the switch, never longer than it came in */
    if (len < 34 || len > MAX_FRAME || data[12] != 0x08 || data[13] != 0x00) sent_bad++;
}

int main(int argc, char **argv) {
    uint64_t frames = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    rng_state = (argc > 2 ? strtoull(argv[2], NULL, 10) : 1) * 0x9E3779B97F4A7C15ULL | 1;
    dp_switch *s = dp_switch_new(MAX_FRAME, 1);
    char err[128];
    for (int p = 1; p <= NPORTS; p++) {
        if (dp_switch_add_port(s, (uint16_t)p, NULL, 32768 + 65536 * (uint64_t)below(3), 0, 0, 0, err,
                              sizeof(err)) < 0) {
            fprintf(stderr, "add_port: %s\n", err);
            return 2;
        }
        dp_egress *e = &s->ports[p]->egress;
        if (p == 1) dp_egress_set_shaper(e, 1000000000ull, 20000, 0);
        if (p == 2) dp_egress_set_shaper(e, 100000000ull, 4000, 0);
        if (p == 3) {
            e->delay_ns = 20000;
            for (int q = 0; q < 8; q++) e->loss[q] = q == 1 ? (1ull << 32) : (1ull << 30);
        }
    }
    uint8_t *f = malloc(MAX_FRAME + 200);
    int overflow = argc > 3 && strcmp(argv[3], "overflow") == 0;
    uint64_t fwd = 0, drop = 0, by_reason[DP_NUM_REASONS] = {0};
    for (uint64_t n = 0; n < frames; n++) {
        if (n % 100000 == 0) {
            add_p4_counters(s->tables);
            fill_tables(s->tables);
        }
        if (n % 50000 == 0) s->ports[4]->egress.paused = (uint8_t)below(256);
        uint32_t len = make_frame(f, n);
        /* an exact-size heap copy, so ASan sees any read past the frame's end */
        uint8_t *frame = malloc(len ? len : 1);
        memcpy(frame, f, len);
        if (overflow && n == frames / 2) f[0] = frame[len];
        dp_verdict v;
        uint16_t port = (uint16_t)(1 + below(NPORTS));
        dp_switch_handle(s, port, frame, len, len, &v); /* in place, as on the receive ring */
        free(frame);
        if (v.drop) {
            drop++;
            if (v.reason == DP_OK || v.reason >= DP_NUM_REASONS) {
                fprintf(stderr, "frame %llu dropped without a reason\n", (unsigned long long)n);
                return 1;
            }
            by_reason[v.reason]++;
        } else {
            fwd++;
        }
        s->now_ns += below(2000);
        if (below(4) == 0) dp_switch_drain(s, out, NULL);
    }
    for (int p = 1; p <= NPORTS; p++) s->ports[p]->egress.paused = 0;
    /* drain: the shapers let a bucket's worth out per instant, so the clock moves on */
    for (int i = 0; i < 100000; i++) {
        s->now_ns += 1000000ull;
        dp_switch_drain(s, out, NULL);
        int busy = 0;
        for (int p = 1; p <= NPORTS; p++) busy |= s->ports[p]->egress.queued != 0 || !dp_egress_line_empty(&s->ports[p]->egress);
        if (!busy) break;
    }
    /* the books: every frame is forwarded or dropped for a reason, every forwarded one sent or lost */
    uint64_t rx = 0, ingress_drops = 0, enq = 0, sent = 0, lost = 0, sel = 0, buf = 0, pushed = 0, trimmed = 0, left = 0;
    for (int p = 1; p <= NPORTS; p++) {
        dp_port_stats *st = &s->ports[p]->egress.stats;
        rx += st->rx;
        for (int r = 0; r < DP_NUM_REASONS; r++) ingress_drops += st->rx_dropped[r];
        for (int q = 0; q < 8; q++) {
            enq += st->cls[q].enqueued;
            sent += st->cls[q].sent;
            lost += st->cls[q].dropped[DP_DROP_LOSS];
            sel += st->cls[q].dropped[DP_DROP_SELECTIVE];
            buf += st->cls[q].dropped[DP_DROP_BUFFER];
            pushed += st->cls[q].dropped[DP_DROP_PUSHED_OUT];
            trimmed += st->cls[q].trimmed;
            left += st->cls[q].depth;
        }
    }
    add_p4_counters(s->tables);
    printf("frames=%llu forwarded=%llu dropped=%llu sent=%llu lost=%llu selective=%llu buffer=%llu pushed_out=%llu "
           "trimmed=%llu",
           (unsigned long long)frames, (unsigned long long)fwd, (unsigned long long)drop, (unsigned long long)sent,
           (unsigned long long)lost, (unsigned long long)sel, (unsigned long long)buf, (unsigned long long)pushed,
           (unsigned long long)trimmed);
    for (int r = 1; r < DP_NUM_REASONS; r++)
        if (r != DP_DROP_PUSHED_OUT) printf(" %s=%llu", dp_reason_name(r), (unsigned long long)by_reason[r]);
    printf("\n");
    int ok = 1;
#define CHECK(c)                                                          \
    if (!(c)) {                                                           \
        fprintf(stderr, "books do not balance: %s\n", #c);               \
        ok = 0;                                                           \
    }
    CHECK(rx == frames);
    CHECK(fwd + drop == frames);
    CHECK(fwd == enq);
    CHECK(drop == ingress_drops + sel + buf);
    CHECK(by_reason[DP_DROP_SELECTIVE] == sel && by_reason[DP_DROP_BUFFER] == buf);
    CHECK(enq == sent + lost + pushed);
    CHECK(sent == sent_frames && sent_bad == 0);
    CHECK(left == 0);
    CHECK(p4_fwd == enq - pushed && p4_drop == sel && p4_trim == trimmed);
    free(f);
    dp_switch_free(s);
    return ok ? 0 : 1;
}
