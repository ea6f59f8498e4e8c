// QueueDiscHarness (api.h): one DLCP queue fed whole IPv4 packets, for the shared P4 vectors.
#include "api.h"
#include "port.h"
#include "queue_disc.h"
#include "switch_config.h"

#include "ns3/address.h"
#include "ns3/ipv4-header.h"
#include "ns3/ipv4-l3-protocol.h"
#include "ns3/ipv4-queue-disc-item.h"
#include "ns3/packet.h"

#include <memory>
#include <string>
#include <vector>

namespace dlcpsim
{

using namespace ns3;

struct QueueDiscHarness::Impl
{
    DlcpSwitchConfig config;
    Ptr<DlcpQueueDisc> qd;         // ns-3's queue disc, or
    std::unique_ptr<PortQueue> pq; // DLCP's port model's queue (port.h)
};

static std::vector<uint8_t>
FromHex(const std::string& hex)
{
    std::vector<uint8_t> out(hex.size() / 2);
    for (size_t i = 0; i < out.size(); ++i)
    {
        out[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
    }
    return out;
}

static std::string
ToHex(const std::vector<uint8_t>& b)
{
    static const char* d = "0123456789abcdef";
    std::string s;
    for (uint8_t x : b)
    {
        s += d[x >> 4];
        s += d[x & 15];
    }
    return s;
}

QueueDiscHarness::QueueDiscHarness(uint32_t limit_packets, bool port_model)
    : m_impl(std::make_unique<Impl>())
{
    if (port_model)
    {
        m_impl->pq = std::make_unique<PortQueue>(&m_impl->config, limit_packets);
        return;
    }
    m_impl->qd = CreateObjectWithAttributes<DlcpQueueDisc>(
        "MaxSize", QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, limit_packets)));
    m_impl->qd->SetConfig(&m_impl->config);
    m_impl->qd->Initialize();
}

QueueDiscHarness::~QueueDiscHarness()
{
    if (m_impl->qd)
    {
        m_impl->qd->Dispose();
    }
}

void
QueueDiscHarness::AddDlcpPort(uint16_t port)
{
    m_impl->config.dlcp_ports.insert(port);
}

void
QueueDiscHarness::AddClassRule(int32_t rule_priority, const std::vector<uint32_t>& value_mask, uint8_t action,
                               uint32_t queue)
{
    m_impl->config.AddRule(MakeRule(rule_priority, value_mask, action, queue));
}

void
QueueDiscHarness::SetThreshold(uint32_t queue, uint32_t drop_class, uint8_t action, uint32_t threshold)
{
    m_impl->config.SetThreshold(queue, drop_class, static_cast<OnCongestion>(action), threshold);
}

void
QueueDiscHarness::SetBufferPolicy(const std::string& policy)
{
    m_impl->config.buffer_policy = ParseBufferPolicy(policy);
}

int32_t
QueueDiscHarness::Enqueue(const std::string& ipv4_hex)
{
    std::vector<uint8_t> bytes = FromHex(ipv4_hex);
    Ptr<Packet> p = Create<Packet>(bytes.data(), static_cast<uint32_t>(bytes.size()));
    Ipv4Header ip;
    p->RemoveHeader(ip);
    if (m_impl->pq)
    {
        bool ok = m_impl->pq->Enqueue(Frame::From(ip, p));
        return ok ? m_impl->pq->LastQueue() : -1;
    }
    auto item = Create<Ipv4QueueDiscItem>(p, Address(), Ipv4L3Protocol::PROT_NUMBER, ip);
    bool ok = m_impl->qd->Enqueue(item);
    return ok ? m_impl->qd->LastQueue() : -1;
}

std::string
QueueDiscHarness::Dequeue()
{
    Ptr<Packet> p;
    if (m_impl->pq)
    {
        Frame f;
        if (!m_impl->pq->Dequeue(f))
        {
            return "";
        }
        p = f.l4->Copy();
        p->AddHeader(f.ip);
    }
    else
    {
        Ptr<QueueDiscItem> item = m_impl->qd->Dequeue();
        if (!item)
        {
            return "";
        }
        Ptr<Ipv4QueueDiscItem> ipItem = DynamicCast<Ipv4QueueDiscItem>(item);
        p = item->GetPacket()->Copy();
        p->AddHeader(ipItem->GetHeader());
    }
    std::vector<uint8_t> out(p->GetSize());
    p->CopyData(out.data(), out.size());
    return ToHex(out);
}

int32_t
QueueDiscHarness::LastDequeuedQueue() const
{
    return m_impl->pq ? m_impl->pq->LastDequeuedQueue() : m_impl->qd->LastDequeuedQueue();
}

const ClassCounters&
QueueDiscHarness::Counters() const
{
    return m_impl->pq ? m_impl->pq->Counters() : m_impl->qd->Counters();
}

uint64_t
QueueDiscHarness::Forwarded(uint32_t cls) const
{
    return Counters().forwarded.at(cls);
}

uint64_t
QueueDiscHarness::Dropped(uint32_t cls) const
{
    return Counters().dropped.at(cls);
}

uint64_t
QueueDiscHarness::Trimmed(uint32_t cls) const
{
    return Counters().trimmed.at(cls);
}

uint64_t
QueueDiscHarness::Overflow(uint32_t cls) const
{
    return Counters().overflow.at(cls);
}

uint64_t
QueueDiscHarness::PushedOut(uint32_t cls) const
{
    return Counters().pushed_out.at(cls);
}

uint32_t
QueueDiscHarness::Depth(uint32_t cls) const
{
    return m_impl->pq ? m_impl->pq->Depth(cls) : m_impl->qd->GetInternalQueue(cls)->GetNPackets();
}

} // namespace dlcpsim
