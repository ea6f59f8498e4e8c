/* The software switch: ports on AF_PACKET (TPACKET_V3 receive ring, sendmmsg), the pipeline,
 * the egress queues, and one data-plane thread that runs them without the GIL.
 *
 * Time of arrival. The kernel hands the receive ring over a block at a time (when it is full,
 * or on a timer of one jiffy, 4 ms at HZ=250), and the thread may wait for a CPU, so frames
 * that arrived milliseconds apart are taken at once. Before a frame is admitted, every port's
 * egress runs up to the frame's arrival time (the kernel's receive timestamp): its admission
 * (thresholds, buffer, push-out) sees the queues as a hardware switch would have at that
 * moment, not the backlog of the thread's late start. What the queues sent in the meantime
 * leaves at once.
 *
 * One mutex guards the tables, counters, queues and statistics. The data-plane thread takes
 * it for one round (a bounded batch of frames per port, then scheduling and sends) and
 * drops it while it waits in ppoll(); control-plane calls take it for their update, which is
 * therefore atomic for the data plane (no torn reads) and waits at most one round.
 *
 * A port without an interface is virtual: frames are handed in with dp_switch_inject() and
 * taken out with dp_switch_drain(), on a clock the caller sets (tests).
 */
#ifndef DLCP_SWITCH_H
#define DLCP_SWITCH_H

#include <pthread.h>
#include <stdint.h>

#include "egress.h"
#include "pipeline.h"

#define DP_RX_BUDGET 256   /* frames per port per round */
#define DP_TX_BATCH 64     /* frames per sendmmsg */
#define DP_LATE_NS 1000000ull /* a frame taken this long after it arrived counts as late (statistics) */

typedef struct {
    int fd;                 /* -1: virtual */
    int ifindex;
    char ifname[32];
    uint8_t *ring;
    size_t ring_len;
    uint32_t block_size, block_nr, block_timeout_ms;
    uint32_t block;         /* next block to read */
    uint32_t left;          /* frames left in the current block (0: none open) */
    uint8_t *next;          /* next frame header in the current block */
    int tx_blocked;         /* the last send hit a full socket buffer */
    int plain_peer;         /* plain forwarder: every frame goes out of this port (-1: off) */
    uint64_t ring_drops;    /* frames the kernel could not put in the ring (PACKET_STATISTICS) */
    uint64_t tx_calls, rx_blocks;
    dp_egress egress;
} dp_port;

typedef struct {
    pthread_mutex_t lock;
    dp_tables *tables;
    uint32_t occupancy[PORT_CLASS_SLOTS];
    dp_port *ports[DP_NUM_PORTS];
    uint16_t port_ids[DP_NUM_PORTS];
    int n_ports;
    uint32_t max_frame;
    uint8_t *scratch;       /* a copy of an injected frame, rewritten in place */
    /* thread */
    pthread_mutex_t ctl;    /* start and stop, one at a time; the data-plane thread never takes it */
    pthread_t thread;
    int running;
    int closed;             /* dp_switch_close(): no port, no thread, ever again */
    volatile int stop;
    int wake_fd;            /* eventfd: wakes the thread from ppoll */
    /* clock */
    int virtual_clock;
    uint64_t now_ns;        /* virtual clock */
    uint64_t arrived_ns;    /* the egress queues have run up to this frame arrival (monotonic ns) */
    uint64_t late_frames, late_ns_max; /* frames taken more than DP_LATE_NS after they arrived; the most late */
    uint64_t untimed_frames; /* frames whose receive timestamp was not on the real-time clock */
    uint64_t rounds, idle_waits;
    uint64_t first_rx_ns, last_tx_ns; /* data-plane thread: first frame taken, last frame sent (benchmarks) */
    uint64_t first_rx_cpu_ns, last_tx_cpu_ns; /* the same moments in the thread's CPU time */
    int thread_id;          /* the data-plane thread's kernel id (0: not started); its /proc/self/task/<id> */
    pthread_cond_t started; /* with lock: signalled when the thread has set thread_id (dp_switch_start waits) */
} dp_switch;

dp_switch *dp_switch_new(uint32_t max_frame, int virtual_clock);
void dp_switch_free(dp_switch *s);
uint64_t dp_switch_now(const dp_switch *s);

/* Adds a port; ifname NULL = virtual. Returns 0, or -errno with a message in err. */
int dp_switch_add_port(dp_switch *s, uint16_t port, const char *ifname, uint64_t buffer, uint32_t block_size,
                       uint32_t block_nr, uint32_t block_timeout_ms, char *err, size_t errlen);

int dp_switch_start(dp_switch *s, char *err, size_t errlen);
void dp_switch_stop(dp_switch *s);
/* Stops the thread and closes every port (socket, ring, queues) now; the switch keeps its tables
 * and counters, refuses new ports and a start. dp_switch_free() does it too. */
void dp_switch_close(dp_switch *s);

/* Virtual ports. */
void dp_switch_inject(dp_switch *s, uint16_t port, const uint8_t *frame, uint32_t len, dp_verdict *v);
/* Runs the egress of every virtual port at the current clock; calls out() for each frame sent. */
void dp_switch_drain(dp_switch *s, void (*out)(void *ctx, uint16_t port, const uint8_t *data, uint32_t len),
                     void *ctx);

/* Runs one received frame through the switch (the caller holds the lock). */
void dp_switch_handle(dp_switch *s, uint16_t in_port, uint8_t *frame, uint32_t len, uint32_t wire_len,
                      dp_verdict *v);

/* A sender for benchmarks: sends `count` frames (cycling through `frames`) in batches on a
 * new AF_PACKET socket bound to ifname, for at most `seconds`. Returns frames sent or -errno. */
int64_t dp_blast(const char *ifname, const uint8_t *const *frames, const uint32_t *lens, int n_frames,
                 uint64_t count, double seconds, uint32_t batch, char *err, size_t errlen);

#endif /* DLCP_SWITCH_H */
