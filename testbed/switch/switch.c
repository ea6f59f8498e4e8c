/* Ports, data-plane thread and virtual ports of the software switch; see switch.h. */
#define _GNU_SOURCE
#include "switch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_QDISC_BYPASS
#define PACKET_QDISC_BYPASS 20
#endif
#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

#define IDLE_WAIT_NS 100000000ull /* ppoll timeout with nothing scheduled (also bounds stop latency) */

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t dp_switch_now(const dp_switch *s) { return s->virtual_clock ? s->now_ns : mono_ns(); }

dp_switch *dp_switch_new(uint32_t max_frame, int virtual_clock) {
    dp_switch *s = calloc(1, sizeof(*s));
    if (s == NULL) return NULL;
    /* first: dp_switch_free() may be called from here on, and must find no fd it does not own (calloc's 0) */
    s->wake_fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->ctl, NULL);
    pthread_cond_init(&s->started, NULL);
    s->tables = malloc(sizeof(dp_tables));
    s->scratch = malloc(max_frame);
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->tables == NULL || s->scratch == NULL || s->wake_fd < 0) {
        dp_switch_free(s);
        return NULL;
    }
    dp_tables_init(s->tables);
    s->max_frame = max_frame;
    s->virtual_clock = virtual_clock;
    return s;
}

static void port_close(dp_port *p) {
    if (p->ring != NULL) munmap(p->ring, p->ring_len);
    if (p->fd >= 0) close(p->fd);
    dp_egress_free(&p->egress);
    free(p);
}

void dp_switch_free(dp_switch *s) {
    if (s == NULL) return;
    dp_switch_close(s);
    if (s->wake_fd >= 0) close(s->wake_fd);
    free(s->tables);
    free(s->scratch);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->ctl);
    pthread_cond_destroy(&s->started);
    free(s);
}

static int open_socket(dp_port *p, const char *ifname, char *err, size_t errlen) {
    unsigned idx = if_nametoindex(ifname);
    if (idx == 0) {
        snprintf(err, errlen, "no interface named %s", ifname);
        return -ENODEV;
    }
    /* protocol 0 until bound: the socket receives nothing from other interfaces meanwhile */
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "AF_PACKET socket for %s: %s", ifname, strerror(e));
        return -e;
    }
    p->fd = fd;
    p->ifindex = (int)idx;
    const char *step = "";
    int v3 = TPACKET_V3, one = 1, sndbuf = 8 << 20;
    struct tpacket_req3 req;
    memset(&req, 0, sizeof(req));
    req.tp_block_size = p->block_size;
    req.tp_block_nr = p->block_nr;
    req.tp_frame_size = 2048; /* V3 packs frames of any size into a block; this only has to divide it */
    req.tp_frame_nr = (p->block_size / req.tp_frame_size) * p->block_nr;
    req.tp_retire_blk_tov = p->block_timeout_ms; /* a partly filled block is handed over after this */
    if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v3, sizeof(v3)) < 0) {
        step = "PACKET_VERSION";
        goto fail;
    }
    if (setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) < 0) {
        step = "PACKET_RX_RING";
        goto fail;
    }
    p->ring_len = (size_t)p->block_size * p->block_nr;
    p->ring = mmap(NULL, p->ring_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_LOCKED, fd, 0);
    if (p->ring == MAP_FAILED) p->ring = mmap(NULL, p->ring_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p->ring == MAP_FAILED) {
        p->ring = NULL;
        step = "mmap";
        goto fail;
    }
    /* best effort: not every kernel has these */
    setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one));
    setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    struct sockaddr_ll sll;
    memset(&sll, 0, sizeof(sll));
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = (int)idx;
    if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
        step = "bind";
        goto fail;
    }
    struct packet_mreq mr;
    memset(&mr, 0, sizeof(mr));
    mr.mr_ifindex = (int)idx;
    mr.mr_type = PACKET_MR_PROMISC;
    if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof(mr)) < 0) {
        step = "promiscuous mode";
        goto fail;
    }
    return 0;
fail: {
    int e = errno;
    snprintf(err, errlen, "%s on %s: %s", step, ifname, strerror(e));
    return -e;
}
}

int dp_switch_add_port(dp_switch *s, uint16_t port, const char *ifname, uint64_t buffer, uint32_t block_size,
                       uint32_t block_nr, uint32_t block_timeout_ms, char *err, size_t errlen) {
    if (port >= DP_NUM_PORTS) {
        snprintf(err, errlen, "port %u out of range 0..%d", port, DP_NUM_PORTS - 1);
        return -EINVAL;
    }
    if (buffer < s->max_frame) {
        snprintf(err, errlen, "buffer %llu B is smaller than the largest frame (%u B)", (unsigned long long)buffer,
                 s->max_frame);
        return -EINVAL;
    }
    dp_port *p = calloc(1, sizeof(*p));
    if (p == NULL) return -ENOMEM;
    p->fd = -1;
    p->plain_peer = -1;
    p->block_size = block_size;
    p->block_nr = block_nr;
    p->block_timeout_ms = block_timeout_ms ? block_timeout_ms : 1;
    if (dp_egress_init(&p->egress, port, buffer, s->max_frame) < 0) {
        free(p);
        snprintf(err, errlen, "no memory for the queues of port %u", port);
        return -ENOMEM;
    }
    if (ifname != NULL) {
        snprintf(p->ifname, sizeof(p->ifname), "%s", ifname);
        int rc = open_socket(p, ifname, err, errlen);
        if (rc < 0) {
            port_close(p);
            return rc;
        }
    }
    /* Checked and inserted under the lock: the Python module calls this without the GIL, so two
     * threads may add the same port at once (both would pass a check made before the work above,
     * and the switch would free one port twice), or add one while another thread starts the switch. */
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    if (s->ports[port] != NULL) {
        snprintf(err, errlen, "port %u given twice", port);
        rc = -EEXIST;
    } else if (s->closed) {
        snprintf(err, errlen, "the switch is closed");
        rc = -EINVAL;
    } else if (s->running) {
        snprintf(err, errlen, "ports are added before the switch starts");
        rc = -EBUSY;
    } else {
        s->ports[port] = p;
        s->port_ids[s->n_ports++] = port;
    }
    pthread_mutex_unlock(&s->lock);
    if (rc < 0) port_close(p);
    return rc;
}

/* ---------------------------------------------------------------- per frame */

void dp_switch_handle(dp_switch *s, uint16_t in_port, uint8_t *frame, uint32_t len, uint32_t wire_len,
                      dp_verdict *v) {
    dp_port_stats *in = &s->ports[in_port]->egress.stats;
    in->rx++;
    in->rx_bytes += wire_len;
    if (len != wire_len || len > s->max_frame) {
        memset(v, 0, sizeof(*v));
        v->drop = 1;
        v->reason = DP_DROP_OVERSIZE;
        in->rx_dropped[DP_DROP_OVERSIZE]++;
        return;
    }
    dp_process(s->tables, frame, len, s->occupancy, v);
    dp_port *out = s->ports[v->port];
    if (v->drop) {
        if (v->reason == DP_DROP_SELECTIVE && out != NULL)
            out->egress.stats.cls[v->port_class & (DP_NUM_QUEUES - 1)].dropped[DP_DROP_SELECTIVE]++;
        else
            in->rx_dropped[v->reason]++;
        return;
    }
    if (out == NULL) {
        v->drop = 1;
        v->reason = DP_DROP_NO_PORT;
        in->rx_dropped[DP_DROP_NO_PORT]++;
        return;
    }
    if (v->trimmed) out->egress.stats.cls[v->port_class & (DP_NUM_QUEUES - 1)].trimmed++;
    int rc = dp_egress_enqueue(&out->egress, frame, v->len, v->queue, s->occupancy);
    if (rc != DP_OK) {
        v->drop = 1;
        v->reason = (uint8_t)rc;
    }
}

/* ---------------------------------------------------------------- data-plane thread */

static void read_ring_drops(dp_port *p) {
    struct tpacket_stats_v3 st;
    socklen_t sl = sizeof(st);
    if (getsockopt(p->fd, SOL_PACKET, PACKET_STATISTICS, &st, &sl) == 0) p->ring_drops += st.tp_drops;
}

/* Plain forwarder: the frames of the open block go out of the peer port straight from the ring. */
static uint32_t forward_plain(dp_switch *s, dp_port *p, uint32_t budget) {
    dp_port *peer = s->ports[p->plain_peer];
    struct mmsghdr msgs[DP_TX_BATCH];
    struct iovec iov[DP_TX_BATCH];
    uint32_t n = 0, done = 0;
    memset(msgs, 0, sizeof(msgs));
    while (p->left > 0 && done < budget) {
        struct tpacket3_hdr *h = (struct tpacket3_hdr *)p->next;
        iov[n].iov_base = (uint8_t *)h + h->tp_mac;
        iov[n].iov_len = h->tp_snaplen;
        msgs[n].msg_hdr.msg_iov = &iov[n];
        msgs[n].msg_hdr.msg_iovlen = 1;
        n++;
        p->egress.stats.rx++;
        p->egress.stats.rx_bytes += h->tp_len;
        p->next = h->tp_next_offset ? (uint8_t *)h + h->tp_next_offset : NULL;
        p->left--;
        done++;
        if (n == DP_TX_BATCH || p->left == 0 || done == budget) {
            uint32_t off = 0;
            while (off < n) {
                int r = sendmmsg(peer->fd, msgs + off, n - off, 0);
                peer->tx_calls++;
                if (r <= 0) {
                    if (r < 0 && errno == EINTR) continue;
                    peer->egress.stats.cls[0].dropped[DP_DROP_TX_ERROR] += n - off;
                    break;
                }
                for (int i = 0; i < r; i++) {
                    peer->egress.stats.cls[0].sent++;
                    peer->egress.stats.cls[0].sent_bytes += iov[off + (uint32_t)i].iov_len;
                }
                off += (uint32_t)r;
            }
            n = 0;
        }
    }
    return done;
}

static uint32_t tx_port(dp_switch *s, dp_port *p, uint64_t now, uint64_t *next_event);

/* Every port's egress runs up to `at`, the arrival time of the next frame (see switch.h). A port
 * whose line holds half its buffer sends now, so that the line never stops the queues' running. */
static void run_egress_to(dp_switch *s, uint64_t at, uint64_t now) {
    if (at <= s->arrived_ns) return;
    s->arrived_ns = at;
    for (int i = 0; i < s->n_ports; i++) {
        dp_port *p = s->ports[s->port_ids[i]];
        if (p->plain_peer >= 0 || p->fd < 0) continue;
        dp_egress_schedule(&p->egress, at, s->occupancy, &s->tables->counters[DP_CTR_FORWARDED], NULL);
        if (2 * p->egress.inflight > p->egress.buffer) {
            uint64_t next_event = UINT64_MAX;
            tx_port(s, p, now, &next_event);
        }
    }
}

/* A frame's arrival on the monotonic clock: its receive timestamp (realtime) less `offset`
 * (realtime - monotonic), kept within the last second and not after `now`. */
static uint64_t arrival_ns(dp_switch *s, const struct tpacket3_hdr *h, uint64_t now, uint64_t offset) {
    uint64_t real = (uint64_t)h->tp_sec * 1000000000ull + (uint64_t)h->tp_nsec;
    uint64_t at = real - offset;
    if (real < offset || at > now + DP_LATE_NS || now - at > 1000000000ull) {
        s->untimed_frames++; /* a stamp on another clock (e.g. a sender's delivery time): taken as it comes */
        return now;
    }
    if (at > now) return now;
    if (now - at > DP_LATE_NS) {
        s->late_frames++;
        if (now - at > s->late_ns_max) s->late_ns_max = now - at;
    }
    return at;
}

static uint32_t rx_port(dp_switch *s, uint16_t id, dp_port *p, uint32_t budget, uint64_t now, uint64_t offset) {
    uint32_t done = 0;
    while (done < budget) {
        struct tpacket_block_desc *bd = (struct tpacket_block_desc *)(p->ring + (size_t)p->block * p->block_size);
        if (p->left == 0) {
            if (!(__atomic_load_n(&bd->hdr.bh1.block_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) break;
            p->left = bd->hdr.bh1.num_pkts;
            p->next = (uint8_t *)bd + bd->hdr.bh1.offset_to_first_pkt;
            p->rx_blocks++;
        }
        if (p->plain_peer >= 0) {
            done += forward_plain(s, p, budget - done);
        } else {
            while (p->left > 0 && done < budget) {
                struct tpacket3_hdr *h = (struct tpacket3_hdr *)p->next;
                dp_verdict v;
                run_egress_to(s, arrival_ns(s, h, now, offset), now);
                dp_switch_handle(s, id, (uint8_t *)h + h->tp_mac, h->tp_snaplen, h->tp_len, &v);
                p->next = h->tp_next_offset ? (uint8_t *)h + h->tp_next_offset : NULL;
                p->left--;
                done++;
            }
        }
        if (p->left == 0) {
            __atomic_store_n(&bd->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
            p->block = (p->block + 1) % p->block_nr;
        }
    }
    return done;
}

/* Sends what is due on one port; returns frames sent. */
static uint32_t tx_port(dp_switch *s, dp_port *p, uint64_t now, uint64_t *next_event) {
    (void)s;
    dp_tx_frame frames[DP_TX_BATCH];
    struct mmsghdr msgs[DP_TX_BATCH];
    struct iovec iov[DP_TX_BATCH];
    uint32_t total = 0;
    p->tx_blocked = 0;
    for (;;) {
        uint32_t n = dp_egress_due(&p->egress, now, frames, DP_TX_BATCH, next_event);
        if (n == 0) break;
        memset(msgs, 0, n * sizeof(msgs[0]));
        for (uint32_t i = 0; i < n; i++) {
            iov[i].iov_base = (void *)frames[i].data;
            iov[i].iov_len = frames[i].len;
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        int r = sendmmsg(p->fd, msgs, n, MSG_DONTWAIT);
        p->tx_calls++;
        if (r > 0) {
            dp_egress_sent(&p->egress, (uint32_t)r);
            total += (uint32_t)r;
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == ENOBUFS || errno == EINTR)) {
            p->tx_blocked = 1;
            break;
        }
        dp_egress_failed(&p->egress); /* e.g. EMSGSIZE: this frame can never go */
    }
    return total;
}

static void *dp_thread(void *arg) {
    dp_switch *s = arg;
    struct pollfd pfd[DP_NUM_PORTS + 1];
    prctl(PR_SET_TIMERSLACK, 1000UL); /* 1 us: shaper and delay wake-ups are timed in ppoll */
    uint64_t last_stats = 0;
    pthread_mutex_lock(&s->lock);
    s->thread_id = (int)gettid();
    pthread_cond_broadcast(&s->started);
    pthread_mutex_unlock(&s->lock);
    while (!s->stop) {
        uint32_t work = 0;
        uint64_t next_event = UINT64_MAX;
        pthread_mutex_lock(&s->lock);
        uint64_t taken = mono_ns(), offset = real_ns();
        offset = offset > taken ? offset - taken : 0;
        int backlog = 0; /* a ring holds more than one round's frames */
        for (int i = 0; i < s->n_ports; i++) {
            uint16_t id = s->port_ids[i];
            uint32_t n = rx_port(s, id, s->ports[id], DP_RX_BUDGET, taken, offset);
            backlog |= n == DP_RX_BUDGET;
            work += n;
        }
        uint64_t now = mono_ns();
        /* The queues run up to the moment the rings were read, not past frames still waiting in them
         * (those arrived earlier and are admitted at their own time, next round). */
        uint64_t egress_to = backlog ? s->arrived_ns : taken;
        if (egress_to > s->arrived_ns) s->arrived_ns = egress_to;
        if (work != 0 && s->first_rx_ns == 0) {
            s->first_rx_ns = now;
            s->first_rx_cpu_ns = thread_cpu_ns();
        }
        int blocked = 0;
        uint32_t sent = 0;
        for (int i = 0; i < s->n_ports; i++) {
            dp_port *p = s->ports[s->port_ids[i]];
            if (p->plain_peer >= 0) {
                sent += work; /* the plain forwarder sent what it took */
                continue;
            }
            work += dp_egress_schedule(&p->egress, egress_to, s->occupancy,
                                       &s->tables->counters[DP_CTR_FORWARDED], &next_event);
            sent += tx_port(s, p, now, &next_event);
            blocked |= p->tx_blocked;
        }
        work += sent;
        if (sent != 0) {
            s->last_tx_ns = mono_ns();
            s->last_tx_cpu_ns = thread_cpu_ns();
        }
        if (now - last_stats > 100000000ull) {
            for (int i = 0; i < s->n_ports; i++) read_ring_drops(s->ports[s->port_ids[i]]);
            last_stats = now;
        }
        s->rounds++;
        int nfd = 0;
        if (work == 0) {
            for (int i = 0; i < s->n_ports; i++) {
                dp_port *p = s->ports[s->port_ids[i]];
                pfd[nfd].fd = p->fd;
                pfd[nfd].events = (short)(POLLIN | (p->tx_blocked ? POLLOUT : 0));
                pfd[nfd].revents = 0;
                nfd++;
            }
        }
        pthread_mutex_unlock(&s->lock);
        if (work != 0) continue;
        pfd[nfd].fd = s->wake_fd;
        pfd[nfd].events = POLLIN;
        pfd[nfd].revents = 0;
        uint64_t wait = IDLE_WAIT_NS;
        if (next_event != UINT64_MAX) wait = next_event > now ? next_event - now : 0;
        if (blocked && wait > 50000) wait = 50000;
        if (wait == 0) continue;
        struct timespec ts = {(time_t)(wait / 1000000000ull), (long)(wait % 1000000000ull)};
        s->idle_waits++;
        ppoll(pfd, (nfds_t)(nfd + 1), &ts, NULL);
        if (pfd[nfd].revents & POLLIN) {
            uint64_t x;
            ssize_t rr = read(s->wake_fd, &x, sizeof(x));
            (void)rr;
        }
    }
    return NULL;
}

int dp_switch_start(dp_switch *s, char *err, size_t errlen) {
    /* Under the lock, so that no port is added between the check of the ports and the start
     * (the thread would read a virtual port's missing ring); the thread waits for the lock. */
    int rc = 0;
    pthread_mutex_lock(&s->ctl);
    pthread_mutex_lock(&s->lock);
    if (s->running) goto out;
    if (s->closed) {
        snprintf(err, errlen, "the switch is closed");
        rc = -EINVAL;
        goto out;
    }
    if (s->virtual_clock) {
        snprintf(err, errlen, "a switch on a virtual clock has no data-plane thread");
        rc = -EINVAL;
        goto out;
    }
    for (int i = 0; i < s->n_ports; i++) {
        if (s->ports[s->port_ids[i]]->fd < 0) {
            snprintf(err, errlen, "port %u is virtual", s->port_ids[i]);
            rc = -EINVAL;
            goto out;
        }
    }
    s->stop = 0;
    rc = pthread_create(&s->thread, NULL, dp_thread, s);
    if (rc != 0) {
        snprintf(err, errlen, "pthread_create: %s", strerror(rc));
        rc = -rc;
        goto out;
    }
    s->running = 1;
    /* Return once the thread has said who it is: a caller that reads its times (thread_times) right after
     * start found no thread under load. The wait gives the lock to the thread, which takes it first. */
    while (s->thread_id == 0) pthread_cond_wait(&s->started, &s->lock);
out:
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(&s->ctl);
    return rc;
}

/* With ctl held: two threads stopping at once would both join the thread (undefined), and a start
 * between the stop flag and the join would clear the flag of a thread still running. */
static void stop_thread(dp_switch *s) {
    if (!s->running) return;
    s->stop = 1;
    uint64_t one = 1;
    ssize_t rr = write(s->wake_fd, &one, sizeof(one));
    (void)rr;
    pthread_join(s->thread, NULL);
    pthread_mutex_lock(&s->lock);
    s->running = 0;
    s->thread_id = 0;
    for (int i = 0; i < s->n_ports; i++) read_ring_drops(s->ports[s->port_ids[i]]);
    pthread_mutex_unlock(&s->lock);
}

void dp_switch_stop(dp_switch *s) {
    pthread_mutex_lock(&s->ctl);
    stop_thread(s);
    pthread_mutex_unlock(&s->ctl);
}

void dp_switch_close(dp_switch *s) {
    pthread_mutex_lock(&s->ctl);
    stop_thread(s);
    /* Under the lock: a control-plane call looks its port up under it, so none holds a port closed here */
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->n_ports; i++) {
        uint16_t id = s->port_ids[i];
        port_close(s->ports[id]);
        s->ports[id] = NULL;
    }
    s->n_ports = 0;
    s->closed = 1;
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(&s->ctl);
}

/* ---------------------------------------------------------------- virtual ports */

void dp_switch_inject(dp_switch *s, uint16_t port, const uint8_t *frame, uint32_t len, dp_verdict *v) {
    uint32_t n = len < s->max_frame ? len : s->max_frame;
    memcpy(s->scratch, frame, n);
    /* a frame over max_frame is dropped as oversize without being looked at */
    dp_switch_handle(s, port, s->scratch, n, len, v);
}

void dp_switch_drain(dp_switch *s, void (*out)(void *ctx, uint16_t port, const uint8_t *data, uint32_t len),
                     void *ctx) {
    uint64_t now = dp_switch_now(s);
    dp_tx_frame frames[DP_TX_BATCH];
    for (int i = 0; i < s->n_ports; i++) {
        uint16_t id = s->port_ids[i];
        dp_port *p = s->ports[id];
        if (p->fd >= 0) continue;
        for (;;) {
            uint32_t moved =
                dp_egress_schedule(&p->egress, now, s->occupancy, &s->tables->counters[DP_CTR_FORWARDED], NULL);
            uint32_t n, sent = 0;
            while ((n = dp_egress_due(&p->egress, now, frames, DP_TX_BATCH, NULL)) > 0) {
                for (uint32_t k = 0; k < n; k++) out(ctx, id, frames[k].data, frames[k].len);
                dp_egress_sent(&p->egress, n);
                sent += n;
            }
            if (moved == 0 && sent == 0) break;
        }
    }
}

/* ---------------------------------------------------------------- benchmark sender */

int64_t dp_blast(const char *ifname, const uint8_t *const *frames, const uint32_t *lens, int n_frames,
                 uint64_t count, double seconds, uint32_t batch, char *err, size_t errlen) {
    if (n_frames <= 0 || batch == 0 || batch > 1024) {
        snprintf(err, errlen, "bad sender arguments");
        return -EINVAL;
    }
    unsigned idx = if_nametoindex(ifname);
    if (idx == 0) {
        snprintf(err, errlen, "no interface named %s", ifname);
        return -ENODEV;
    }
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "AF_PACKET socket: %s", strerror(e));
        return -e;
    }
    int one = 1, sndbuf = 8 << 20;
    setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    struct sockaddr_ll sll;
    memset(&sll, 0, sizeof(sll));
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = 0; /* send only */
    sll.sll_ifindex = (int)idx;
    if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
        int e = errno; /* before close(), which may change it */
        snprintf(err, errlen, "bind to %s: %s", ifname, strerror(e));
        close(fd);
        return -e;
    }
    struct mmsghdr *msgs = calloc(batch, sizeof(*msgs));
    struct iovec *iov = calloc(batch, sizeof(*iov));
    if (msgs == NULL || iov == NULL) {
        free(msgs);
        free(iov);
        close(fd);
        return -ENOMEM;
    }
    uint64_t sent = 0, next = 0;
    uint64_t deadline = mono_ns() + (uint64_t)(seconds * 1e9);
    while (sent < count) {
        uint32_t n = batch;
        if (count - sent < n) n = (uint32_t)(count - sent);
        for (uint32_t i = 0; i < n; i++) {
            int k = (int)((next + i) % (uint64_t)n_frames);
            iov[i].iov_base = (void *)frames[k];
            iov[i].iov_len = lens[k];
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        int r = sendmmsg(fd, msgs, n, 0);
        if (r < 0) {
            if (errno == EINTR || errno == ENOBUFS || errno == EAGAIN) {
                sched_yield();
                continue;
            }
            int e = errno;
            snprintf(err, errlen, "sendmmsg on %s: %s", ifname, strerror(e));
            free(msgs);
            free(iov);
            close(fd);
            return -e;
        }
        sent += (uint64_t)r;
        next += (uint64_t)r;
        if ((sent & 0x3FF) < (uint64_t)r && mono_ns() > deadline) break;
    }
    free(msgs);
    free(iov);
    close(fd);
    return (int64_t)sent;
}
