// The interface Python sees (through cppyy): build a fabric, add traffic, run, read
// statistics. Deliberately free of ns-3 headers, so that loading it costs cling
// almost nothing; everything per packet stays in C++ (simulation.cc and the components).
#pragma once

#include "active_shares.h"
#include "message_state.h"
#include "types.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dlcpsim
{

/** How one message travels and how DLCP marks it (ignored by TCP but for the size). */
struct MessageMeta
{
    uint8_t transport = 0; // Transport: 0 DLCP, 1 TCP
    uint8_t kind = 0;      // MessageKind
    uint16_t layer = 0;
    uint8_t priority = 0;
    double loss_bound = 0.0;
    std::vector<double> drop_fractions{1.0, 0.0, 0.0, 0.0}; // of packets in drop classes 0..3
};

/** A training job: parameter server (mode 0) or ring all-reduce (mode 1). */
struct JobSpec
{
    uint8_t mode = 0;
    uint8_t transport = 0;
    std::vector<uint32_t> workers;
    std::vector<uint32_t> servers; // PS: layer l is served by servers[l % size]
    std::vector<uint64_t> layer_bytes;
    std::vector<double> forward_s;  // compute time per layer
    std::vector<double> backward_s;
    std::vector<uint8_t> priority; // per layer (the core's policy)
    std::vector<double> push_drop_fractions{1.0, 0.0, 0.0, 0.0}; // PS push and reduce-scatter
    std::vector<double> pull_drop_fractions{1.0, 0.0, 0.0, 0.0}; // PS pull and all-gather
    std::vector<double> push_bound;  // per layer: PUSH / REDUCE_SCATTER loss bound
    std::vector<double> pull_bound;  // per layer: PULL / ALL_GATHER loss bound
    // Ring: the fraction of a layer in each worker's chunk, by the hops' rates (the core's
    // dlcp.ring_shares.chunk_weights); empty: even chunks.
    std::vector<double> ring_weights;
    uint32_t iterations = 1;
    double start = 0.0;
    uint32_t tag = 0;
};

struct SwitchTotals
{
    // per class, summed over switch ports; overflow: buffer full and nothing lower to push out
    std::vector<uint64_t> forwarded, dropped, trimmed, overflow, pushed_out, marked;
    uint64_t qdisc_received = 0;  // packets entering any queue disc (hosts and switches)
    uint64_t qdisc_dropped = 0;   // dropped by any queue disc (selective, overflow, RED, ...)
    uint64_t qdisc_sent = 0;
    uint64_t switch_forwarded = 0; // packets sent by switch queue discs (hops through switches)
    uint64_t host_rx_packets = 0;  // IPv4 packets delivered to hosts' transports
    uint64_t route_lookups = 0;
    uint64_t switch_dropped = 0;   // DLCP switches: no route or TTL expired (0 in a sound fabric)
    // DLCP's port model, switch ports: packets queued ahead of each arrival (summed), and the most any found
    uint64_t switch_arrivals = 0;
    uint64_t arrival_depth_sum = 0;
    uint64_t arrival_depth_peak = 0;
};

class SimulationImpl;

class Simulation
{
  public:
    explicit Simulation(uint64_t seed);
    ~Simulation();

    // ---- topology (before Build) ----
    uint32_t AddNode(bool host);
    /** A link; `rate_ba_bps` > 0: the rate from b to a, when it differs (a shaped switch-to-host port). */
    void AddLink(uint32_t a, uint32_t b, double rate_bps, double delay_s, double rate_ba_bps = 0);
    void SetMtu(uint32_t mtu);
    /** Switch ports: "dlcp", "fifo" or "red_ecn"; buffer in packets; ECN marking threshold (0: none). */
    void SetSwitchQueue(const std::string& kind, uint32_t limit_packets, uint32_t ecn_threshold);
    /** DLCP queue discs: "push_out" (the software switch's policy, the default) or "tail_drop". */
    void SetBufferPolicy(const std::string& policy);
    /** DLCP routing: spray DLCP data packets per packet (true, the default) or hash flows only. */
    void SetSpraying(bool spray);
    void SetHostQueueLimit(uint32_t limit_packets);
    /** "dlcp" (O(1) next hops, spraying) or "global" (ns-3's global routing, random ECMP). */
    void SetRouting(const std::string& kind);
    /** "dlcp": DLCP's port model (port.h) wherever routing is "dlcp", with DLCP's, RED/ECN or FIFO queues;
     *  "ns3": ns-3's point-to-point devices, channels and queue discs everywhere. */
    void SetPorts(const std::string& kind);
    /** After Build: whether this run uses DLCP's port model. */
    bool UsesPortModel() const;
    void SetTransport(const TransportParams& params);
    /** Pace DLCP senders per receiver at their share over the senders active now (ActiveShares, set up
     *  through Shares() before Run), instead of at one rate per host. */
    void SetActivePacing(bool on);
    ActiveShares& Shares();
    /** TCP for TCP messages: "newreno" or "dctcp"; minimum RTO; segment size; socket buffers. */
    void SetTcp(const std::string& variant, double min_rto_s, uint32_t segment_bytes, uint32_t buffer_bytes);
    /** TCP messages on "lean" (the lean TCP, lean_tcp.h, where the port model runs; ns-3's sockets elsewhere) or
     *  "ns3" (ns-3's sockets and the hosts' IP stacks everywhere). */
    void SetTcpStack(const std::string& kind);
    /** After Build: whether this run's TCP messages use the lean TCP. */
    bool UsesLeanTcp() const;
    // The switch's DLCP tables (the controller's entries), applied to every DLCP queue disc.
    void AddDlcpPort(uint16_t port);
    void AddClassRule(int32_t rule_priority, const std::vector<uint32_t>& value_mask, uint8_t action, uint32_t queue);
    void SetDlcpThreshold(uint32_t queue, uint32_t drop_class, uint8_t action, uint32_t threshold);

    void Build();

    // ---- routing tables (after Build; only with "dlcp" routing) ----
    void SetGroup(uint32_t node, uint32_t gid, const std::vector<uint32_t>& next_nodes);
    /** host_gid[h] = group towards host h from `node` (-1: none). */
    void SetHostGroups(uint32_t node, const std::vector<int32_t>& host_gid);
    void SetDefaultGroup(uint32_t node, uint32_t gid);

    // ---- traffic ----
    uint32_t AddMessage(uint32_t src_host, uint32_t dst_host, double start_s, uint64_t bytes, const MessageMeta& meta,
                        uint32_t tag);
    uint32_t AddJob(const JobSpec& job);

    // ---- run and read ----
    void Run(double stop_s);
    uint32_t NumRecords() const;
    const FlowRecord& Record(uint32_t i) const;
    /** Per iteration: the time every worker of the job had finished it (-1: not finished). */
    std::vector<double> JobIterationEnds(uint32_t job) const;
    HostCounters Hosts() const;
    SwitchTotals Switches() const;
    uint64_t Events() const;
    /** TCP connections opened (one per pair of hosts and workload tag that exchanged a TCP message). */
    uint32_t TcpConnections() const;
    /** A DLCP host's sending rate now, bytes/s (after Run: where its rate control left it). */
    double HostRate(uint32_t host) const;
    /** Seconds host `host`'s pacer added over its line (HostCounters::pacing_excess_s, this host's part). */
    double HostPacingExcess(uint32_t host) const;
    double Now() const;

  private:
    std::unique_ptr<SimulationImpl> m_impl;
};

struct ClassCounters;

/** A lone DLCP queue fed whole IPv4 packets (hex), for the shared P4 vectors: ns-3's queue disc
 *  (queue_disc.h), or with `port_model` the queue of DLCP's port model (port.h). */
class QueueDiscHarness
{
  public:
    explicit QueueDiscHarness(uint32_t limit_packets, bool port_model = false);
    ~QueueDiscHarness();
    void AddDlcpPort(uint16_t port);
    void AddClassRule(int32_t rule_priority, const std::vector<uint32_t>& value_mask, uint8_t action, uint32_t queue);
    void SetThreshold(uint32_t queue, uint32_t drop_class, uint8_t action, uint32_t threshold);
    void SetBufferPolicy(const std::string& policy);
    /** Enqueue an IPv4 packet (header and payload, hex); returns the queue it went to, or -1 if dropped. */
    int32_t Enqueue(const std::string& ipv4_hex);
    /** Dequeue the next packet by strict priority: its IPv4 bytes (hex), or "" when empty. */
    std::string Dequeue();
    int32_t LastDequeuedQueue() const;
    uint64_t Forwarded(uint32_t cls) const;
    uint64_t Dropped(uint32_t cls) const;
    uint64_t Trimmed(uint32_t cls) const;
    uint64_t Overflow(uint32_t cls) const;
    uint64_t PushedOut(uint32_t cls) const;
    /** Packets queued in class `cls` now. */
    uint32_t Depth(uint32_t cls) const;

  private:
    const ClassCounters& Counters() const;
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace dlcpsim
