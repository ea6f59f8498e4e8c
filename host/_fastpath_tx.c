/*
 * dlcp.host._fastpath, send: the packets of one message, headers filled in from a
 * template, payloads gathered in place, GSO datagrams sent with sendmmsg, paced if
 * asked, without the GIL (tx_send).
 */
#include "_fastpath.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <time.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif

#define TX_BATCH 64 /* datagrams (GSO groups) per sendmmsg */

static inline void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/*
 * tx_send(fd, template, payload, seqs, pb, epp, pkt_count, last_bytes, flags, priority, drop_class, last,
 *         ip, port, tos, seg_size, rate, burst) -> (packets, refused, slept_s)
 *
 * Sends packets `seqs` (int64, sorted) of one message whose elements are
 * `payload`: headers are the 40-byte `template` with flags, priority, drop
 * class, seq and offset filled in (and the length of the last packet, which
 * carries `last_bytes` rather than `pb`),
 * payloads are gathered from `payload` (no copy), grouped into GSO datagrams
 * of up to 64 KB, sendmmsg'd TX_BATCH at a time with the IP TOS byte -- all
 * without the GIL. `last`: set the LAST flag on the final packet. A full
 * socket buffer is waited out (poll); a peer's ICMP port-unreachable drops
 * that datagram and is counted in `refused`.
 *
 * Pacing (`rate` > 0, bytes per second of header + payload): the packets leave
 * in bursts of at most `burst` bytes (at least one packet), burst k no earlier
 * than k * burst / rate after the first, sleeping in between without the GIL;
 * `slept_s` is the time slept. One call thus paces a whole message's pass that
 * Python would otherwise cut into a call (and a sleep) per burst, each costing
 * a transition into C and the interpreter's bookkeeping. `rate` 0: unpaced.
 */
PyObject *tx_send(PyObject *self, PyObject *args) {
    (void)self;
    int fd, flags, priority, drop_class, last, tos;
    unsigned ip, port;
    Py_ssize_t pb, epp, pkt_count, last_bytes, seg_size, burst = 0;
    double rate = 0.0;
    Py_buffer tmpl, payload, seqs_buf;
    if (!PyArg_ParseTuple(args, "iy*y*y*nnnniiiiIIin|dn", &fd, &tmpl, &payload, &seqs_buf, &pb, &epp, &pkt_count,
                          &last_bytes, &flags, &priority, &drop_class, &last, &ip, &port, &tos, &seg_size, &rate,
                          &burst))
        return NULL;
    PyObject *result = NULL;
    uint8_t *hdrs = NULL;
    struct iovec *iov = NULL;
    const int64_t *seqs = (const int64_t *)seqs_buf.buf;
    Py_ssize_t k = seqs_buf.len / (Py_ssize_t)sizeof(int64_t);
    const size_t H = DLCP_HEADER_BYTES;
    if (tmpl.len != (Py_ssize_t)H || pb <= 0 || epp <= 0 || pkt_count <= 0 || last_bytes < 0 || last_bytes > pb ||
        seg_size != (Py_ssize_t)H + pb || port > 65535) {
        PyErr_SetString(PyExc_ValueError, "tx_send: inconsistent header template, packet sizes or address");
        goto out;
    }
    if (!(rate >= 0.0) || !isfinite(rate) || burst < 0) {
        PyErr_SetString(PyExc_ValueError, "tx_send: rate and burst must be >= 0 (rate finite)");
        goto out;
    }
    /* Segments per sendmmsg batch: all of them unpaced, a burst's worth paced. */
    Py_ssize_t burst_segs = rate > 0.0 ? (burst > seg_size ? burst / seg_size : 1) : k + 1;
    for (Py_ssize_t i = 0; i < k; i++) {
        int64_t q = seqs[i];
        Py_ssize_t len = q == pkt_count - 1 ? last_bytes : pb;
        if (q < 0 || q >= pkt_count || (i && q <= seqs[i - 1]) || q * pb + len > payload.len) {
            PyErr_Format(PyExc_ValueError, "tx_send: seq %lld out of order or outside the payload", (long long)q);
            goto out;
        }
    }
    size_t per = (size_t)(65000 / seg_size);
    if (per > 64) per = 64;
    if (per < 1) per = 1;
    hdrs = PyMem_RawMalloc((size_t)(k ? k : 1) * H);
    iov = PyMem_RawMalloc(sizeof(struct iovec) * TX_BATCH * 2 * per);
    if (!hdrs || !iov) {
        PyErr_NoMemory();
        goto out;
    }
    Py_ssize_t sent = 0, refused = 0;
    int err = 0;
    double slept = 0.0;

    Py_BEGIN_ALLOW_THREADS
    const uint8_t *base = (const uint8_t *)payload.buf;
    for (Py_ssize_t i = 0; i < k; i++) {
        uint8_t *h = hdrs + (size_t)i * H;
        uint32_t q = (uint32_t)seqs[i];
        memcpy(h, tmpl.buf, H);
        h[DLCP_OFF_FLAGS] = (uint8_t)(flags | (last && i == k - 1 ? (int)DLCP_FLAG_LAST : 0));
        h[DLCP_OFF_PRIORITY] = (uint8_t)priority;
        h[DLCP_OFF_DROP_CLASS] = (uint8_t)drop_class;
        put_be32(h + DLCP_OFF_SEQ, q);
        put_be32(h + DLCP_OFF_OFFSET, (uint32_t)((uint64_t)q * (uint64_t)epp));
        if ((Py_ssize_t)q == pkt_count - 1 && last_bytes != pb) {
            h[DLCP_OFF_LENGTH] = (uint8_t)(last_bytes >> 8);
            h[DLCP_OFF_LENGTH + 1] = (uint8_t)last_bytes;
        }
    }
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(ip)};
    union {
        char buf[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    put_tos((struct cmsghdr *)ctl.buf, tos);
    struct cmsghdr *c = (struct cmsghdr *)(ctl.buf + CMSG_SPACE(sizeof(int)));
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    uint16_t gso = (uint16_t)seg_size;
    memcpy(CMSG_DATA(c), &gso, sizeof gso);

    struct mmsghdr mm[TX_BATCH];
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double paced_bytes = 0.0; /* bytes released before this batch */
    double forgiven = 0.0;    /* seconds the schedule moved on while this thread was not running */
    /* A burst may leave at most half a burst's time behind its schedule. A thread that did not run for longer
     * (a busy host's scheduler, not a sleep's overshoot) does not catch up: the bursts it missed would leave
     * back to back, fill the switch's queue past its drop thresholds and come back as trimmed packets, each a
     * retransmission round, where the lost time is a few hundred microseconds of one message's pass. */
    const double max_lag = rate > 0.0 ? 0.5 * (double)burst_segs * (double)seg_size / rate : 0.0;
    Py_ssize_t i = 0;
    while (i < k && !err) {
        int nmsg = 0;
        size_t nio = 0;
        Py_ssize_t first = i;
        if (rate > 0.0 && first > 0) { /* this burst leaves no earlier than the rate allows */
            clock_gettime(CLOCK_MONOTONIC, &now);
            double elapsed = (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec);
            double due = paced_bytes / rate + forgiven;
            if (elapsed - due > max_lag) {
                forgiven += elapsed - due - max_lag;
                due = elapsed - max_lag;
            }
            double ahead = due - elapsed;
            if (ahead > 20e-6) {
                struct timespec until = t0;
                long long ns = (long long)until.tv_nsec + (long long)(due * 1e9);
                until.tv_sec += (time_t)(ns / 1000000000LL);
                until.tv_nsec = (long)(ns % 1000000000LL);
                while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
                }
                slept += ahead;
            }
        }
        while (nmsg < TX_BATCH && i < k && i - first < burst_segs) {
            size_t count = 0;
            struct iovec *v = iov + nio;
            while (count < per && i < k && i - first < burst_segs) {
                int64_t q = seqs[i];
                size_t len = q == pkt_count - 1 ? (size_t)last_bytes : (size_t)pb;
                v[2 * count].iov_base = hdrs + (size_t)i * H;
                v[2 * count].iov_len = H;
                v[2 * count + 1].iov_base = (void *)(base + (size_t)q * (size_t)pb);
                v[2 * count + 1].iov_len = len;
                count++;
                i++;
                if (len != (size_t)pb) break; /* GSO: only a datagram's final segment may be short */
            }
            memset(&mm[nmsg], 0, sizeof mm[nmsg]);
            mm[nmsg].msg_hdr.msg_name = &to;
            mm[nmsg].msg_hdr.msg_namelen = sizeof to;
            mm[nmsg].msg_hdr.msg_iov = v;
            mm[nmsg].msg_hdr.msg_iovlen = 2 * count;
            mm[nmsg].msg_hdr.msg_control = ctl.buf;
            /* A lone packet goes without UDP_SEGMENT (only the IP_TOS cmsg). */
            mm[nmsg].msg_hdr.msg_controllen = count > 1 ? sizeof ctl.buf : CMSG_SPACE(sizeof(int));
            nio += 2 * count;
            nmsg++;
        }
        int done = 0;
        while (done < nmsg) {
            int r = sendmmsg(fd, mm + done, (unsigned)(nmsg - done), 0);
            if (r < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
                    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
                    poll(&pfd, 1, 10);
                    continue;
                }
                if (errno == ECONNREFUSED) { /* that datagram is lost; the transport's timers notice */
                    refused++;
                    done++;
                    continue;
                }
                err = errno;
                break;
            }
            done += r;
        }
        sent += i - first;
        paced_bytes += (double)(i - first) * (double)seg_size;
    }
    Py_END_ALLOW_THREADS

    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto out;
    }
    result = Py_BuildValue("(nnd)", sent, refused, slept);
out:
    PyMem_RawFree(hdrs);
    PyMem_RawFree(iov);
    PyBuffer_Release(&tmpl);
    PyBuffer_Release(&payload);
    PyBuffer_Release(&seqs_buf);
    return result;
}
