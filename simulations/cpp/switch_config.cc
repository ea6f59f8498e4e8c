#include "switch_config.h"

#include "wire.h"

#include "ns3/abort.h"

#include <algorithm>
#include <stdexcept>

namespace dlcpsim
{

using namespace ns3;

void
DlcpSwitchConfig::AddRule(const ClassRule& rule)
{
    rules.push_back(rule);
    std::stable_sort(rules.begin(), rules.end(), [](const ClassRule& a, const ClassRule& b) {
        return a.rule_priority > b.rule_priority;
    });
}

void
DlcpSwitchConfig::SetThreshold(uint32_t queue, uint32_t drop_class, OnCongestion action, uint32_t threshold)
{
    NS_ABORT_MSG_IF(queue >= DLCP_NUM_PRIORITY_CLASSES || drop_class >= DLCP_NUM_DROP_CLASSES,
                    "threshold for queue " << queue << " drop class " << drop_class << " out of range");
    thresholds[queue][drop_class] = Threshold{action, threshold};
}

Classified
DlcpSwitchConfig::Classify(const Ipv4Header& ip, const uint8_t* l4, uint32_t l4len) const
{
    Classified c;
    // The parser extracts a DLCP header from any unfragmented UDP datagram long enough to hold one.
    if (ip.GetProtocol() != IPPROTO_UDP || ip.GetFragmentOffset() != 0 || l4len < MIN_DLCP_UDP_LENGTH)
    {
        return c;
    }
    uint32_t udp_len = GetField(l4, 4, 2);
    if (udp_len < MIN_DLCP_UDP_LENGTH)
    {
        return c;
    }
    uint16_t dst_port = static_cast<uint16_t>(GetField(l4, 2, 2));
    const uint8_t* h = l4 + UDP_HEADER_BYTES;
    bool is_dlcp = dst_port == DLCP_UDP_PORT || dlcp_ports.count(dst_port) > 0;
    uint8_t type = PacketTypeOf(h);
    uint32_t priority = h[DLCP_OFF_PRIORITY];
    uint32_t drop_class = h[DLCP_OFF_DROP_CLASS];
    if (VersionOf(h) != DLCP_VERSION || type > DLCP_TYPE_MAX || priority >= DLCP_NUM_PRIORITY_CLASSES ||
        drop_class >= DLCP_NUM_DROP_CLASSES)
    {
        is_dlcp = false; // malformed: forwarded as ordinary UDP
    }
    if (!is_dlcp)
    {
        return c;
    }
    c.is_dlcp = true;
    c.packet_type = type;
    c.drop_class = static_cast<uint8_t>(drop_class);
    c.seq = GetField(h, DLCP_OFF_SEQ, DLCP_SIZE_SEQ);
    uint32_t job = GetField(h, DLCP_OFF_JOB_ID, DLCP_SIZE_JOB_ID);
    uint32_t kind = h[DLCP_OFF_KIND];
    c.queue = priority; // use_packet_priority, the default action
    c.drop_eligible = false;
    for (const ClassRule& r : rules)
    {
        if ((job & r.job_mask) == (r.job_value & r.job_mask) && (type & r.type_mask) == (r.type_value & r.type_mask) &&
            (priority & r.priority_mask) == (r.priority_value & r.priority_mask) &&
            (drop_class & r.drop_mask) == (r.drop_value & r.drop_mask) &&
            (kind & r.kind_mask) == (r.kind_value & r.kind_mask))
        {
            switch (r.action)
            {
            case ClassAction::SET_QUEUE:
                c.queue = r.queue;
                break;
            case ClassAction::MARK_DROP_ELIGIBLE:
                c.queue = r.queue;
                c.drop_eligible = true;
                break;
            case ClassAction::USE_PACKET_PRIORITY:
                break;
            }
            break;
        }
    }
    uint8_t flags = h[DLCP_OFF_FLAGS];
    if (type != DLCP_TYPE_DATA || (flags & DLCP_FLAG_RETX) != 0 || drop_class == 0)
    {
        c.drop_eligible = false;
    }
    if (type == DLCP_TYPE_TRIMMED)
    {
        c.queue = TRIM_QUEUE;
    }
    return c;
}

ClassRule
MakeRule(int32_t rule_priority, const std::vector<uint32_t>& vm, uint8_t action, uint32_t queue)
{
    if (vm.size() != 10 || action > 2 || queue >= DLCP_NUM_PRIORITY_CLASSES)
    {
        throw std::invalid_argument("a class rule has 5 (value, mask) pairs, an action 0..2 and a queue 0..7");
    }
    ClassRule r;
    r.rule_priority = rule_priority;
    r.job_value = vm[0], r.job_mask = vm[1];
    r.type_value = vm[2], r.type_mask = vm[3];
    r.priority_value = vm[4], r.priority_mask = vm[5];
    r.drop_value = vm[6], r.drop_mask = vm[7];
    r.kind_value = vm[8], r.kind_mask = vm[9];
    r.action = static_cast<ClassAction>(action);
    r.queue = queue;
    return r;
}

BufferPolicy
ParseBufferPolicy(const std::string& policy)
{
    if (policy == "push_out")
    {
        return BufferPolicy::PUSH_OUT;
    }
    if (policy == "tail_drop")
    {
        return BufferPolicy::TAIL_DROP;
    }
    throw std::invalid_argument("buffer policy must be push_out or tail_drop, got " + policy);
}

} // namespace dlcpsim
