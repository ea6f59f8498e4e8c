// DLCP's port model: the lean replacement for ns-3's point-to-point NetDevice,
// channel and traffic-control queue disc on DLCP's fabric (routing = "dlcp" with
// DLCP queues; Simulation::SetPorts). docs/simulations.md, "How it is built".
//
// A packet travels between ports as a Frame: its IPv4 header kept parsed, the
// first bytes of L4 (UDP + DLCP header) copied once, and the L4 bytes as an
// ns3::Packet. No hop serializes or parses the IPv4 header again, copies the
// packet, wraps it in a queue-disc item, adds a PPP header or goes through
// ns-3's queue, trace and flow-control machinery.
//
// Same semantics as the ns-3 path it replaces (build.cc builds either):
//   * the queue, one of three disciplines: DLCP's -- DlcpSwitchConfig's
//     classification, selective drop, trimming, strict priority, the shared buffer
//     with push-out, ECN marking and the per-class counters of DlcpQueueDisc
//     (queue_disc.h) --, a drop-tail FIFO (ns-3's FifoQueueDisc: the tcp baseline's
//     switches, and the hosts of the tcp and dctcp baselines), or a FIFO with RED's
//     ECN marking (ns-3's RedQueueDisc as the dctcp baseline configures it:
//     RedMarker, same formulas and the same random stream per port), each with
//     ns-3's queue-disc statistics;
//   * the transmitter: serialization of the IPv4 packet plus ns-3's 2-byte PPP
//     header at the link's rate (DataRate::CalculateBytesTxTime), arrival at the
//     peer after serialization plus the propagation delay;
//   * between the two, the point-to-point device's one-packet queue and its flow
//     control: a packet waits in a one-packet slot while the transmitter is busy,
//     and after the transmitter takes a packet the slot is refilled by a wake-up
//     event scheduled for the same instant (ns-3's NetDeviceQueue::PacketDequeued).
//     Kept so that runs reproduce the ns-3 path event for event (tests/test_sim_ports.py).
#pragma once

#include "switch_config.h"

#include "ns3/channel.h"
#include "ns3/data-rate.h"
#include "ns3/ipv4-header.h"
#include "ns3/mac48-address.h"
#include "ns3/net-device.h"
#include "ns3/node.h"
#include "ns3/packet.h"
#include "ns3/random-variable-stream.h"

#include <array>
#include <cstdint>
#include <deque>
#include <memory>

namespace dlcpsim
{

/** An IPv4 packet on DLCP's fabric: header parsed, L4 head cached, L4 onwards as a packet. */
struct Frame
{
    ns3::Ipv4Header ip;
    ns3::Ptr<ns3::Packet> l4;                 // L4 header onwards (none: a lean TCP segment, all in `head`)
    uint8_t head[MIN_DLCP_UDP_LENGTH]{}; // the first bytes of l4 (UDP + DLCP header)
    uint32_t head_len = 0;
    bool trim = false; // cut to its headers as it leaves TRIM_QUEUE (queue_disc.cc's m_toTrim)

    /** IPv4 packet size (what a queue-disc item's GetSize() was). A frame of the lean TCP has no L4 packet:
     *  its size is its IPv4 header's. */
    uint32_t Size() const
    {
        return ip.GetSerializedSize() + (l4 ? l4->GetSize() : ip.GetPayloadSize());
    }

    /** A frame from an L4 packet and its IPv4 header (the head copied out of the packet). */
    static Frame From(const ns3::Ipv4Header& ip, ns3::Ptr<ns3::Packet> l4);
};

class DlcpPort;

/** Who takes the frames a port receives: a switch's forwarding, or a host. */
class FrameSink
{
  public:
    virtual ~FrameSink() = default;
    virtual void ReceiveFrame(DlcpPort* in, Frame&& frame) = 0;
};

/** Queue statistics, as ns-3's QueueDisc::Stats counts them. */
struct PortStats
{
    uint64_t received = 0; // offered to the queue (admitted or not)
    uint64_t dropped = 0;  // selective drops, overflow, pushed out
    uint64_t sent = 0;     // handed to the transmitter
    uint64_t depth_sum = 0;  // packets queued ahead of each arrival, summed
    uint64_t depth_peak = 0; // the most an arrival found queued
};

/** RED's parameters, in packets (ns-3's RedQueueDisc attributes of the same names; no adaptive variant). */
struct RedParams
{
    double min_th = 5;
    double max_th = 15;
    double q_w = 0.002;     // QW: weight of the newest queue length in the average
    double l_interm = 50;   // LInterm: 1 / the marking probability at max_th
    bool gentle = true;     // Gentle: the probability rises to 1 between max_th and 2 max_th
    bool wait = true;       // Wait: space marks out by the packets counted since the last one
    uint32_t mean_packet_bytes = 500;
    double link_bps = 1.5e6;

    /** The dctcp baseline's switch queues: the instantaneous queue (QW = 1) against K (MinTh = K, MaxTh = K + 1). */
    static RedParams Dctcp(uint32_t k, uint32_t mtu, double link_bps);
};

/** RED's decision on each arrival, computed as ns-3's RedQueueDisc computes it (packet mode, ECN on, no hard drop). */
class RedMarker
{
  public:
    /** `uniform`: the port's random stream (a UniformRandomVariable on [0, 1), as RED's own). */
    RedMarker(const RedParams& params, ns3::Ptr<ns3::UniformRandomVariable> uniform);

    /** A packet arrives at a queue of `queued` packets: true if RED marks it (drops it, if not ECN-capable). */
    bool Congested(uint32_t queued);
    /** A dequeue found the queue empty (RED's idle period starts) or not. */
    void Dequeued(bool empty);

  private:
    bool MarkEarly();

    RedParams m_p;
    ns3::Ptr<ns3::UniformRandomVariable> m_uniform;
    double m_avg = 0;      // average queue (packets)
    uint32_t m_count = 0;  // arrivals since the last early mark
    bool m_old = false;    // the average was above min_th at the last arrival
    bool m_idle = true;
    ns3::Time m_idleSince;
    double m_ptc;          // packets per second at the link's rate
    double m_maxP, m_vA, m_vB, m_vC, m_vD;
};

/** What a port's queue does with the frames offered to it. */
enum class Discipline : uint8_t
{
    DLCP = 0,    // DlcpSwitchConfig: classes, selective drop, trimming, push-out
    FIFO = 1,    // one drop-tail queue
    RED_ECN = 2, // one queue, RED's marks (drops of packets that are not ECN-capable), then drop-tail
};

/** The queue of one port: DLCP's (classification, selective drop, trimming, push-out, strict priority),
 *  or one FIFO, drop-tail or with RED's ECN marking. */
class PortQueue
{
  public:
    /** DLCP's queue. */
    PortQueue(const DlcpSwitchConfig* config, uint32_t limit)
        : m_config(config),
          m_limit(limit)
    {
    }

    /** A FIFO of `limit` packets: drop-tail, or with RED's marking when `red` is given. */
    PortQueue(uint32_t limit, std::unique_ptr<RedMarker> red)
        : m_discipline(red ? Discipline::RED_ECN : Discipline::FIFO),
          m_limit(limit),
          m_red(std::move(red))
    {
    }

    Discipline Kind() const
    {
        return m_discipline;
    }

    /** Offer a frame; false if it was dropped (selective drop or buffer full). */
    bool Enqueue(Frame&& frame);
    /** The next frame by strict priority (trimmed if it is to be); false when empty. */
    bool Dequeue(Frame& out);

    bool Empty() const
    {
        return m_size == 0;
    }

    uint32_t Depth(uint32_t cls) const
    {
        return static_cast<uint32_t>(m_queues[cls].size());
    }

    const ClassCounters& Counters() const
    {
        return m_counters;
    }

    const PortStats& Stats() const
    {
        return m_stats;
    }

    int32_t LastQueue() const
    {
        return m_lastQueue;
    }

    int32_t LastDequeuedQueue() const
    {
        return m_lastDequeued;
    }

  private:
    bool Admit(Frame&& frame, uint32_t queue);
    bool EnqueueFifo(Frame&& frame);
    bool PushOut(uint32_t queue);
    static void Trim(Frame& frame);

    Discipline m_discipline = Discipline::DLCP;
    const DlcpSwitchConfig* m_config = nullptr;
    uint32_t m_limit;
    std::unique_ptr<RedMarker> m_red;
    uint32_t m_size = 0;
    std::array<std::deque<Frame>, DLCP_NUM_PRIORITY_CLASSES> m_queues;
    ClassCounters m_counters;
    PortStats m_stats;
    int32_t m_lastQueue = -1;
    int32_t m_lastDequeued = -1;
};

class DlcpLink;

/** A port: the DLCP queue, a one-packet device slot and a transmitter onto a DlcpLink. */
class DlcpPort : public ns3::NetDevice
{
  public:
    static ns3::TypeId GetTypeId();
    DlcpPort();
    ~DlcpPort() override;

    void Configure(const DlcpSwitchConfig* config, uint32_t limit_packets, ns3::DataRate rate);
    /** A port with the given queue (any discipline). */
    void Configure(std::unique_ptr<PortQueue> queue, ns3::DataRate rate);
    void Connect(ns3::Ptr<DlcpLink> link, DlcpPort* peer);
    void SetSink(FrameSink* sink)
    {
        m_sink = sink;
    }

    /** Queue a frame for transmission (the switch's egress, or a host's send). */
    void Enqueue(Frame&& frame);
    /** Hand a received frame to the node's IP stack (a host's non-DLCP traffic). */
    void DeliverUp(Frame&& frame);

    const PortQueue& Queue() const
    {
        return *m_queue;
    }

    // ns3::NetDevice (what a host's IPv4 stack uses; a switch's ports are driven directly)
    void SetIfIndex(const uint32_t index) override;
    uint32_t GetIfIndex() const override;
    ns3::Ptr<ns3::Channel> GetChannel() const override;
    void SetAddress(ns3::Address address) override;
    ns3::Address GetAddress() const override;
    bool SetMtu(const uint16_t mtu) override;
    uint16_t GetMtu() const override;
    bool IsLinkUp() const override;
    void AddLinkChangeCallback(ns3::Callback<void> callback) override;
    bool IsBroadcast() const override;
    ns3::Address GetBroadcast() const override;
    bool IsMulticast() const override;
    ns3::Address GetMulticast(ns3::Ipv4Address multicastGroup) const override;
    ns3::Address GetMulticast(ns3::Ipv6Address addr) const override;
    bool IsBridge() const override;
    bool IsPointToPoint() const override;
    bool Send(ns3::Ptr<ns3::Packet> packet, const ns3::Address& dest, uint16_t protocolNumber) override;
    bool SendFrom(ns3::Ptr<ns3::Packet> packet,
                  const ns3::Address& source,
                  const ns3::Address& dest,
                  uint16_t protocolNumber) override;
    ns3::Ptr<ns3::Node> GetNode() const override;
    void SetNode(ns3::Ptr<ns3::Node> node) override;
    bool NeedsArp() const override;
    void SetReceiveCallback(ns3::NetDevice::ReceiveCallback cb) override;
    void SetPromiscReceiveCallback(ns3::NetDevice::PromiscReceiveCallback cb) override;
    bool SupportsSendFrom() const override;

  private:
    friend class ArrivalEvent;
    void Run();
    void DeviceSend(Frame&& frame);
    void StartTransmit();
    void TransmitComplete();
    void Wake();
    void Arrive(Frame&& frame);
    void DoDispose() override;
    /** DataRate::CalculateBytesTxTime, remembered for the last few sizes (its 128-bit division was
     *  11% of the port model's instructions; a fabric sends few distinct sizes). */
    ns3::Time TxTime(uint32_t bytes);

    struct TxTimeEntry
    {
        uint32_t bytes = UINT32_MAX;
        ns3::Time time;
    };

    std::unique_ptr<PortQueue> m_queue;
    ns3::DataRate m_rate;
    std::array<TxTimeEntry, 4> m_txTimes{};
    ns3::Ptr<DlcpLink> m_link;
    DlcpPort* m_peer = nullptr;
    uint32_t m_peerContext = 0;
    FrameSink* m_sink = nullptr;
    Frame m_slot;          // the device's one-packet queue
    bool m_slotFull = false;
    bool m_busy = false;   // transmitting
    bool m_stopped = false; // the device queue is full until the wake-up after the transmitter takes a packet

    ns3::Ptr<ns3::Node> m_node;
    uint32_t m_ifIndex = 0;
    ns3::Mac48Address m_address;
    uint16_t m_mtu = 1500;
    ns3::NetDevice::ReceiveCallback m_rx;
};

/** The wire between two ports: a propagation delay. */
class DlcpLink : public ns3::Channel
{
  public:
    static ns3::TypeId GetTypeId();
    void Attach(ns3::Ptr<DlcpPort> a, ns3::Ptr<DlcpPort> b, ns3::Time delay);

    ns3::Time Delay() const
    {
        return m_delay;
    }

    std::size_t GetNDevices() const override;
    ns3::Ptr<ns3::NetDevice> GetDevice(std::size_t i) const override;

  private:
    void DoDispose() override;
    std::array<ns3::Ptr<DlcpPort>, 2> m_ends;
    ns3::Time m_delay;
};

} // namespace dlcpsim
