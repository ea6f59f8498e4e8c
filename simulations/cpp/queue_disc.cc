#include "queue_disc.h"

#include "wire.h"

#include "ns3/drop-tail-queue.h"
#include "ns3/ipv4-queue-disc-item.h"
#include "ns3/log.h"
#include "ns3/object-factory.h"
#include "ns3/packet.h"

#include <algorithm>

namespace dlcpsim
{

using namespace ns3;

NS_LOG_COMPONENT_DEFINE("DlcpQueueDisc");
NS_OBJECT_ENSURE_REGISTERED(DlcpQueueDisc);
NS_OBJECT_ENSURE_REGISTERED(ClassQueue);

static constexpr const char* SELECTIVE_DROP = "DLCP selective drop";
static constexpr const char* BUFFER_FULL = "Buffer full";

TypeId
ClassQueue::GetTypeId()
{
    static TypeId tid = TypeId("dlcpsim::ClassQueue")
                            .SetParent<Queue<QueueDiscItem>>()
                            .SetGroupName("TrafficControl")
                            .AddConstructor<ClassQueue>()
                            .AddAttribute("MaxSize",
                                          "The max queue size",
                                          QueueSizeValue(QueueSize("100p")),
                                          MakeQueueSizeAccessor(&QueueBase::SetMaxSize, &QueueBase::GetMaxSize),
                                          MakeQueueSizeChecker());
    return tid;
}

bool
ClassQueue::Enqueue(Ptr<QueueDiscItem> item)
{
    return DoEnqueue(GetContainer().end(), item);
}

Ptr<QueueDiscItem>
ClassQueue::Dequeue()
{
    return DoDequeue(GetContainer().begin());
}

Ptr<QueueDiscItem>
ClassQueue::Remove()
{
    return DoRemove(GetContainer().begin());
}

Ptr<const QueueDiscItem>
ClassQueue::Peek() const
{
    return DoPeek(GetContainer().begin());
}

Ptr<QueueDiscItem>
ClassQueue::RemoveNewest()
{
    if (IsEmpty())
    {
        return nullptr;
    }
    // DoRemove fires the Dequeue and Drop traces the queue disc listens to, so its packet
    // counts and drop statistics stay exact (received = sent + dropped).
    return DoRemove(std::prev(GetContainer().end()));
}

TypeId
DlcpQueueDisc::GetTypeId()
{
    static TypeId tid = TypeId("dlcpsim::DlcpQueueDisc")
                            .SetParent<QueueDisc>()
                            .SetGroupName("TrafficControl")
                            .AddConstructor<DlcpQueueDisc>()
                            .AddAttribute("MaxSize",
                                          "The shared buffer of the port, in packets",
                                          QueueSizeValue(QueueSize("1000p")),
                                          MakeQueueSizeAccessor(&QueueDisc::SetMaxSize, &QueueDisc::GetMaxSize),
                                          MakeQueueSizeChecker());
    return tid;
}

DlcpQueueDisc::DlcpQueueDisc()
    : QueueDisc(QueueDiscSizePolicy::MULTIPLE_QUEUES, QueueSizeUnit::PACKETS)
{
}

DlcpQueueDisc::~DlcpQueueDisc() = default;

bool
DlcpQueueDisc::PushOut(uint32_t queue)
{
    for (uint32_t q = 0; q < queue; ++q)
    {
        Ptr<ClassQueue> victim = StaticCast<ClassQueue>(GetInternalQueue(q));
        if (!victim->IsEmpty())
        {
            victim->RemoveNewest(); // never TRIM_QUEUE: no class is above it
            m_counters.pushed_out[q]++;
            return true;
        }
    }
    return false;
}

bool
DlcpQueueDisc::Admit(Ptr<QueueDiscItem> item, uint32_t queue)
{
    bool push_out = m_config == nullptr || m_config->buffer_policy == BufferPolicy::PUSH_OUT;
    while (push_out && GetCurrentSize().GetValue() + 1 > GetMaxSize().GetValue() && PushOut(queue))
    {
    }
    if (GetCurrentSize().GetValue() + 1 > GetMaxSize().GetValue())
    {
        m_counters.overflow[queue]++;
        m_lastQueue = -1;
        DropBeforeEnqueue(item, BUFFER_FULL);
        return false;
    }
    bool ok = GetInternalQueue(queue)->Enqueue(item);
    m_lastQueue = ok ? static_cast<int32_t>(queue) : -1;
    return ok;
}

bool
DlcpQueueDisc::DoEnqueue(Ptr<QueueDiscItem> item)
{
    Ptr<Ipv4QueueDiscItem> ipItem = DynamicCast<Ipv4QueueDiscItem>(item);
    if (!ipItem || m_config == nullptr)
    {
        return Admit(item, DEFAULT_QUEUE);
    }
    uint8_t l4[MIN_DLCP_UDP_LENGTH];
    Ptr<Packet> p = item->GetPacket();
    uint32_t l4len = p->CopyData(l4, sizeof(l4));
    Classified c = m_config->Classify(ipItem->GetHeader(), l4, l4len);
    uint32_t occupancy = GetInternalQueue(c.queue)->GetNPackets();
    switch (m_config->OnArrival(c, occupancy))
    {
    case OnCongestion::DROP:
        m_counters.dropped[c.queue]++;
        m_lastQueue = -1;
        DropBeforeEnqueue(item, SELECTIVE_DROP);
        return false;
    case OnCongestion::TRIM:
        // The packet goes to TRIM_QUEUE now and is cut to its headers as it leaves (DoDequeue):
        // ns-3's queue-disc statistics require an enqueued item to keep its size.
        m_counters.trimmed[c.queue]++;
        if (!Admit(item, TRIM_QUEUE))
        {
            return false;
        }
        m_toTrim.insert(item->GetPacket()->GetUid());
        return true;
    case OnCongestion::ADMIT:
        break;
    }
    if (m_config->ecn_threshold > 0 && occupancy >= m_config->ecn_threshold && item->Mark())
    {
        m_counters.marked[c.queue]++;
    }
    return Admit(item, c.queue);
}

Ptr<QueueDiscItem>
DlcpQueueDisc::DoDequeue()
{
    for (uint32_t q = DLCP_NUM_PRIORITY_CLASSES; q-- > 0;)
    {
        Ptr<QueueDiscItem> item = GetInternalQueue(q)->Dequeue();
        if (item && q == TRIM_QUEUE && !m_toTrim.empty() && m_toTrim.erase(item->GetPacket()->GetUid()) > 0)
        {
            item = Trim(item);
        }
        if (item)
        {
            m_counters.forwarded[q]++;
            m_counters.forwarded_bytes[q] += item->GetSize();
            m_lastDequeued = static_cast<int32_t>(q);
            return item;
        }
    }
    return nullptr;
}

Ptr<QueueDiscItem>
DlcpQueueDisc::Trim(Ptr<QueueDiscItem> item)
{
    // Cut to UDP + DLCP header: type TRIMMED (length field unchanged), UDP length 48, zero UDP checksum.
    Ptr<Ipv4QueueDiscItem> ipItem = DynamicCast<Ipv4QueueDiscItem>(item);
    uint8_t cut[MIN_DLCP_UDP_LENGTH];
    item->GetPacket()->CopyData(cut, sizeof(cut));
    SetField(cut, 4, 2, MIN_DLCP_UDP_LENGTH);
    SetField(cut, 6, 2, 0);
    uint8_t* h = cut + UDP_HEADER_BYTES;
    h[DLCP_OFF_VER_TYPE] = static_cast<uint8_t>((h[DLCP_OFF_VER_TYPE] & 0xf0) | DLCP_TYPE_TRIMMED);
    Ipv4Header ip = ipItem->GetHeader();
    ip.SetPayloadSize(MIN_DLCP_UDP_LENGTH);
    Ptr<Packet> tp = Create<Packet>(cut, MIN_DLCP_UDP_LENGTH);
    return Create<Ipv4QueueDiscItem>(tp, item->GetAddress(), item->GetProtocol(), ip);
}

Ptr<const QueueDiscItem>
DlcpQueueDisc::DoPeek()
{
    for (uint32_t q = DLCP_NUM_PRIORITY_CLASSES; q-- > 0;)
    {
        Ptr<const QueueDiscItem> item = GetInternalQueue(q)->Peek();
        if (item)
        {
            return item;
        }
    }
    return nullptr;
}

bool
DlcpQueueDisc::CheckConfig()
{
    if (GetNQueueDiscClasses() > 0 || GetNPacketFilters() > 0)
    {
        NS_LOG_ERROR("DlcpQueueDisc classifies by itself: no classes or filters");
        return false;
    }
    if (GetNInternalQueues() == 0)
    {
        for (uint32_t q = 0; q < DLCP_NUM_PRIORITY_CLASSES; ++q)
        {
            // Each class queue may hold the whole shared buffer; the limit is enforced in Admit.
            AddInternalQueue(CreateObjectWithAttributes<ClassQueue>(
                "MaxSize",
                QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, GetMaxSize().GetValue() + 1))));
        }
    }
    return GetNInternalQueues() == DLCP_NUM_PRIORITY_CLASSES;
}

void
DlcpQueueDisc::InitializeParams()
{
}

} // namespace dlcpsim
