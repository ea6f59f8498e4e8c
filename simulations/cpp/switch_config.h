// The switch's DLCP configuration (the controller's entries) and its decisions on a
// packet, shared by both DLCP queues: ns-3's queue disc (queue_disc.h) and the port
// model's PortQueue (port.h).
//
//   * Classification (p4src/common/classification.p4): a UDP datagram to a DLCP
//     port long enough for the header is DLCP unless malformed; the dlcp_classes
//     rules (ternary, highest rule priority wins, default: the packet's own
//     priority class, not drop-eligible) pick its queue; control packets,
//     retransmissions and drop class 0 are never eligible; TRIMMED headers go to
//     TRIM_QUEUE; everything else to DEFAULT_QUEUE.
//   * Selective drop and trimming (selective_drop.p4, trimming.p4): the
//     (queue, drop class) thresholds a queue applies to an eligible packet.
#pragma once

#include "dlcp_constants.h"

#include "ns3/ipv4-header.h"

#include <array>
#include <cstdint>
#include <string>
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

/** A dlcp_classes entry from the API's encoding: 5 (value, mask) pairs (job, type, priority, drop class,
 *  kind), an action 0..2 (ClassAction) and a queue. */
ClassRule MakeRule(int32_t rule_priority, const std::vector<uint32_t>& vm, uint8_t action, uint32_t queue);

/** "push_out" or "tail_drop". */
BufferPolicy ParseBufferPolicy(const std::string& policy);

} // namespace dlcpsim
