// The DLCP queue disc: the switch behaviour of p4src/ on an ns-3 egress port.
//
//   * Classification (p4src/common/classification.p4): a UDP datagram to a DLCP
//     port long enough for the header is DLCP unless malformed; the dlcp_classes
//     rules (ternary, highest rule priority wins, default: the packet's own
//     priority class, not drop-eligible) pick its queue; control packets,
//     retransmissions and drop class 0 are never eligible; TRIMMED headers go to
//     TRIM_QUEUE; everything else to DEFAULT_QUEUE.
//   * Selective drop and trimming (selective_drop.p4, trimming.p4): an eligible
//     packet that finds more than the (queue, drop class) threshold of packets
//     in its queue is dropped, or cut to its headers and sent in TRIM_QUEUE.
//   * Strict priority over the NUM_PRIORITY_CLASSES queues, a shared buffer of
//     MaxSize packets, and counters per class.
//   * The buffer policy of DLCP's software switch (testbed/switch/egress.c;
//     docs/protocol.md, "Switch buffer"): a packet that finds the buffer full
//     pushes out the newest packet of the lowest non-empty class below its own
//     (counted `pushed_out` for that class), as many times as it needs room; with
//     no lower class queued it is dropped (`overflow`). So under overload a
//     higher class keeps its share of the buffer as it keeps its share of the
//     link, and control packets and retransmissions (class 7) are never lost to
//     data. BufferPolicy "tail_drop" (a plain shared buffer) is kept for comparison.
//   * Optional ECN marking (not in the P4 program; a commodity-switch feature):
//     an ECN-capable packet finding EcnThreshold or more packets in its queue is
//     marked CE, so DCTCP background traffic behaves as on a DCTCP fabric.
#pragma once

#include "dlcp_constants.h"

#include "ns3/queue.h"
#include "ns3/ipv4-header.h"
#include "ns3/queue-disc.h"

#include <array>
#include <cstdint>
#include <unordered_set>
#include <vector>

namespace dlcpsim
{

enum class ClassAction : uint8_t
{
    SET_QUEUE = 0,
    MARK_DROP_ELIGIBLE = 1,
    USE_PACKET_PRIORITY = 2,
};

enum class OnCongestion : uint8_t
{
    ADMIT = 0,
    DROP = 1,
    TRIM = 2,
};

/** One dlcp_classes entry: ternary (value, mask) per key, as in the P4Info. */
struct ClassRule
{
    int32_t rule_priority = 0;
    uint32_t job_value = 0, job_mask = 0;
    uint32_t type_value = 0, type_mask = 0;
    uint32_t priority_value = 0, priority_mask = 0;
    uint32_t drop_value = 0, drop_mask = 0;
    uint32_t kind_value = 0, kind_mask = 0;
    ClassAction action = ClassAction::USE_PACKET_PRIORITY;
    uint32_t queue = 0;
};

enum class BufferPolicy : uint8_t
{
    PUSH_OUT = 0,
    TAIL_DROP = 1,
};

struct Threshold
{
    OnCongestion action = OnCongestion::ADMIT;
    uint32_t threshold = 0;
};

/** The classification result (local_metadata_t's fields of the same names). */
struct Classified
{
    bool is_dlcp = false;
    uint32_t queue = DEFAULT_QUEUE;
    bool drop_eligible = false;
    uint8_t drop_class = 0;
    uint8_t packet_type = 0;
    uint32_t seq = 0;
};

/** The switch's DLCP configuration, shared by every port of a switch (the controller's entries). */
struct DlcpSwitchConfig
{
    std::unordered_set<uint16_t> dlcp_ports;
    std::vector<ClassRule> rules; // kept sorted by rule_priority, highest first
    std::array<std::array<Threshold, DLCP_NUM_DROP_CLASSES>, DLCP_NUM_PRIORITY_CLASSES> thresholds{};
    uint32_t ecn_threshold = 0; // 0: no ECN marking
    BufferPolicy buffer_policy = BufferPolicy::PUSH_OUT;

    void AddRule(const ClassRule& rule);
    void SetThreshold(uint32_t queue, uint32_t drop_class, OnCongestion action, uint32_t threshold);

    /** Classify an IPv4 packet: its header and the first bytes of its payload (L4 onwards). */
    Classified Classify(const ns3::Ipv4Header& ip, const uint8_t* l4, uint32_t l4len) const;

    /** What a port does with a classified packet arriving while its class holds ``occupancy`` packets:
     *  ADMIT, or (drop-eligible, above its threshold) the threshold's DROP or TRIM. */
    OnCongestion OnArrival(const Classified& c, uint32_t occupancy) const
    {
        const Threshold& t = thresholds[c.queue][c.drop_class];
        return c.drop_eligible && occupancy > t.threshold ? t.action : OnCongestion::ADMIT;
    }
};

/** Adds one port's per-class counters into a run's totals. */
template <typename Totals, typename Counters>
void
AddClassCounters(Totals& t, const Counters& c, size_t classes)
{
    for (size_t i = 0; i < classes; ++i)
    {
        t.forwarded[i] += c.forwarded[i];
        t.dropped[i] += c.dropped[i];
        t.trimmed[i] += c.trimmed[i];
        t.overflow[i] += c.overflow[i];
        t.pushed_out[i] += c.pushed_out[i];
        t.marked[i] += c.marked[i];
    }
}

struct ClassCounters
{
    std::array<uint64_t, DLCP_NUM_PRIORITY_CLASSES> forwarded{};
    std::array<uint64_t, DLCP_NUM_PRIORITY_CLASSES> forwarded_bytes{};
    std::array<uint64_t, DLCP_NUM_PRIORITY_CLASSES> dropped{};  // selective drops
    std::array<uint64_t, DLCP_NUM_PRIORITY_CLASSES> trimmed{};
    std::array<uint64_t, DLCP_NUM_PRIORITY_CLASSES> overflow{}; // buffer full, nothing lower to push out
    std::array<uint64_t, DLCP_NUM_PRIORITY_CLASSES> pushed_out{}; // queued, then pushed out by a higher class
    std::array<uint64_t, DLCP_NUM_PRIORITY_CLASSES> marked{};   // ECN CE
};

/** A FIFO class queue (as DropTailQueue) that can also give up its newest packet (push-out). */
class ClassQueue : public ns3::Queue<ns3::QueueDiscItem>
{
  public:
    static ns3::TypeId GetTypeId();
    bool Enqueue(ns3::Ptr<ns3::QueueDiscItem> item) override;
    ns3::Ptr<ns3::QueueDiscItem> Dequeue() override;
    ns3::Ptr<ns3::QueueDiscItem> Remove() override;
    ns3::Ptr<const ns3::QueueDiscItem> Peek() const override;
    /** Removes the newest packet; the queue disc counts it as dropped after dequeue. */
    ns3::Ptr<ns3::QueueDiscItem> RemoveNewest();
};

class DlcpQueueDisc : public ns3::QueueDisc
{
  public:
    static ns3::TypeId GetTypeId();
    DlcpQueueDisc();
    ~DlcpQueueDisc() override;

    void SetConfig(const DlcpSwitchConfig* config)
    {
        m_config = config;
    }

    const ClassCounters& Counters() const
    {
        return m_counters;
    }

    /** The queue the last enqueued item went to (for tests); -1 if it was dropped. */
    int32_t LastQueue() const
    {
        return m_lastQueue;
    }

    /** The queue of the last dequeued item (for tests). */
    int32_t LastDequeuedQueue() const
    {
        return m_lastDequeued;
    }

  private:
    bool DoEnqueue(ns3::Ptr<ns3::QueueDiscItem> item) override;
    ns3::Ptr<ns3::QueueDiscItem> DoDequeue() override;
    ns3::Ptr<const ns3::QueueDiscItem> DoPeek() override;
    bool CheckConfig() override;
    void InitializeParams() override;
    bool Admit(ns3::Ptr<ns3::QueueDiscItem> item, uint32_t queue);
    /** Push out the newest packet of the lowest non-empty class below `queue`; false if none. */
    bool PushOut(uint32_t queue);
    ns3::Ptr<ns3::QueueDiscItem> Trim(ns3::Ptr<ns3::QueueDiscItem> item);

    const DlcpSwitchConfig* m_config = nullptr;
    ClassCounters m_counters;
    int32_t m_lastQueue = -1;
    int32_t m_lastDequeued = -1;
    std::unordered_set<uint64_t> m_toTrim; // packet uids to cut to their headers as they leave TRIM_QUEUE
};

} // namespace dlcpsim
