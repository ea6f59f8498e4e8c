#include "port.h"

#include "wire.h"

#include "ns3/abort.h"
#include "ns3/log.h"
#include "ns3/simulator.h"

#include <algorithm>
#include <cmath>

namespace dlcpsim
{

using namespace ns3;

NS_LOG_COMPONENT_DEFINE("DlcpPort");
NS_OBJECT_ENSURE_REGISTERED(DlcpPort);
NS_OBJECT_ENSURE_REGISTERED(DlcpLink);

Frame
Frame::From(const Ipv4Header& ip, Ptr<Packet> l4)
{
    Frame f;
    f.ip = ip;
    f.l4 = l4;
    f.head_len = l4->CopyData(f.head, sizeof(f.head));
    return f;
}

// ---- RedMarker: RedQueueDisc's decisions ----------------------------------------

RedParams
RedParams::Dctcp(uint32_t k, uint32_t mtu, double link_bps)
{
    RedParams p;
    p.min_th = k;
    p.max_th = k + 1.0;
    p.q_w = 1.0;
    p.mean_packet_bytes = mtu;
    p.link_bps = link_bps;
    return p;
}

RedMarker::RedMarker(const RedParams& params, Ptr<UniformRandomVariable> uniform)
    : m_p(params),
      m_uniform(std::move(uniform))
{
    NS_ABORT_MSG_IF(m_p.q_w <= 0 || m_p.min_th > m_p.max_th, "RED: QW > 0 and MinTh <= MaxTh");
    // As RedQueueDisc::InitializeParams: the probability's line between the thresholds, and (gentle) above.
    m_ptc = m_p.link_bps / (8.0 * m_p.mean_packet_bytes);
    double span = m_p.max_th - m_p.min_th;
    if (span == 0)
    {
        span = 1.0;
    }
    m_vA = 1.0 / span;
    m_maxP = 1.0 / m_p.l_interm;
    m_vB = -m_p.min_th / span;
    m_vC = m_p.gentle ? (1.0 - m_maxP) / m_p.max_th : 0.0;
    m_vD = m_p.gentle ? 2.0 * m_maxP - 1.0 : 0.0;
}

bool
RedMarker::Congested(uint32_t queued)
{
    // The average, aged by the packets the link could have sent while the queue was idle.
    uint32_t idle_packets = 0;
    if (m_idle)
    {
        idle_packets = static_cast<uint32_t>(m_ptc * (Simulator::Now() - m_idleSince).GetSeconds());
        m_idle = false;
    }
    double avg = m_avg * std::pow(1.0 - m_p.q_w, idle_packets + 1);
    avg += m_p.q_w * queued;
    m_avg = avg;
    m_count++;
    if (m_avg >= m_p.min_th && queued > 1)
    {
        if (m_avg >= (m_p.gentle ? 2 * m_p.max_th : m_p.max_th))
        {
            return true; // forced
        }
        if (!m_old)
        {
            // Just crossed min_th: start counting, no mark yet.
            m_count = 1;
            m_old = true;
            return false;
        }
        return MarkEarly();
    }
    m_old = false;
    return false;
}

bool
RedMarker::MarkEarly()
{
    double p;
    if (m_avg >= m_p.max_th)
    {
        p = m_p.gentle ? m_vC * m_avg + m_vD : 1.0;
    }
    else
    {
        p = m_vA * m_avg + m_vB;
        p *= m_maxP;
    }
    p = std::min(p, 1.0);
    // Spread marks out by the arrivals counted since the last one.
    double cp = static_cast<double>(m_count) * p;
    if (m_p.wait)
    {
        p = cp < 1.0 ? 0.0 : cp < 2.0 ? p / (2.0 - cp) : 1.0;
    }
    else
    {
        p = cp < 1.0 ? p / (1.0 - cp) : 1.0;
    }
    p = std::min(p, 1.0);
    double u = m_uniform->GetValue(); // drawn whatever p is, as RED draws it
    if (u <= p)
    {
        m_count = 0;
        return true;
    }
    return false;
}

void
RedMarker::Dequeued(bool empty)
{
    m_idle = empty;
    if (empty)
    {
        m_idleSince = Simulator::Now();
    }
}

// ---- PortQueue: DlcpQueueDisc's decisions over frames ---------------------------

bool
PortQueue::PushOut(uint32_t queue)
{
    for (uint32_t q = 0; q < queue; ++q)
    {
        if (!m_queues[q].empty())
        {
            m_queues[q].pop_back(); // the newest; never TRIM_QUEUE: no class is above it
            --m_size;
            m_counters.pushed_out[q]++;
            m_stats.dropped++;
            return true;
        }
    }
    return false;
}

bool
PortQueue::Admit(Frame&& frame, uint32_t queue)
{
    bool push_out = m_discipline == Discipline::DLCP &&
                    (m_config == nullptr || m_config->buffer_policy == BufferPolicy::PUSH_OUT);
    while (push_out && m_size + 1 > m_limit && PushOut(queue))
    {
    }
    if (m_size + 1 > m_limit)
    {
        m_counters.overflow[queue]++;
        m_lastQueue = -1;
        m_stats.dropped++;
        return false;
    }
    m_queues[queue].push_back(std::move(frame));
    ++m_size;
    m_lastQueue = static_cast<int32_t>(queue);
    return true;
}

bool
PortQueue::EnqueueFifo(Frame&& frame)
{
    // As RedQueueDisc::DoEnqueue (its decision first, then the internal queue's limit) or FifoQueueDisc.
    if (m_red && m_red->Congested(m_size))
    {
        if (frame.ip.GetEcn() == Ipv4Header::ECN_NotECT)
        {
            m_counters.dropped[DEFAULT_QUEUE]++;
            m_lastQueue = -1;
            m_stats.dropped++;
            return false;
        }
        frame.ip.SetEcn(Ipv4Header::ECN_CE); // as Ipv4QueueDiscItem::Mark
        m_counters.marked[DEFAULT_QUEUE]++;
    }
    return Admit(std::move(frame), DEFAULT_QUEUE);
}

bool
PortQueue::Enqueue(Frame&& frame)
{
    m_stats.received++;
    m_stats.depth_sum += m_size;
    m_stats.depth_peak = std::max<uint64_t>(m_stats.depth_peak, m_size);
    if (m_discipline != Discipline::DLCP)
    {
        return EnqueueFifo(std::move(frame));
    }
    if (m_config == nullptr)
    {
        return Admit(std::move(frame), DEFAULT_QUEUE);
    }
    Classified c = m_config->Classify(frame.ip, frame.head, frame.head_len);
    uint32_t occupancy = static_cast<uint32_t>(m_queues[c.queue].size());
    switch (m_config->OnArrival(c, occupancy))
    {
    case OnCongestion::DROP:
        m_counters.dropped[c.queue]++;
        m_lastQueue = -1;
        m_stats.dropped++;
        return false;
    case OnCongestion::TRIM:
        m_counters.trimmed[c.queue]++;
        frame.trim = true;
        return Admit(std::move(frame), TRIM_QUEUE);
    case OnCongestion::ADMIT:
        break;
    }
    if (m_config->ecn_threshold > 0 && occupancy >= m_config->ecn_threshold &&
        frame.ip.GetEcn() != Ipv4Header::ECN_NotECT)
    {
        frame.ip.SetEcn(Ipv4Header::ECN_CE); // as Ipv4QueueDiscItem::Mark
        m_counters.marked[c.queue]++;
    }
    return Admit(std::move(frame), c.queue);
}

void
PortQueue::Trim(Frame& frame)
{
    // Cut to UDP + DLCP header: type TRIMMED (length field unchanged), UDP length 48, zero UDP checksum.
    uint8_t* cut = frame.head;
    SetField(cut, 4, 2, MIN_DLCP_UDP_LENGTH);
    SetField(cut, 6, 2, 0);
    uint8_t* h = cut + UDP_HEADER_BYTES;
    h[DLCP_OFF_VER_TYPE] = static_cast<uint8_t>((h[DLCP_OFF_VER_TYPE] & 0xf0) | DLCP_TYPE_TRIMMED);
    frame.ip.SetPayloadSize(MIN_DLCP_UDP_LENGTH);
    frame.l4 = Create<Packet>(cut, MIN_DLCP_UDP_LENGTH);
    frame.head_len = MIN_DLCP_UDP_LENGTH;
    frame.trim = false;
}

bool
PortQueue::Dequeue(Frame& out)
{
    for (uint32_t q = DLCP_NUM_PRIORITY_CLASSES; q-- > 0;)
    {
        std::deque<Frame>& fifo = m_queues[q];
        if (fifo.empty())
        {
            continue;
        }
        out = std::move(fifo.front());
        fifo.pop_front();
        --m_size;
        if (out.trim)
        {
            Trim(out);
        }
        m_counters.forwarded[q]++;
        m_counters.forwarded_bytes[q] += out.Size();
        m_lastDequeued = static_cast<int32_t>(q);
        m_stats.sent++;
        if (m_red)
        {
            m_red->Dequeued(false);
        }
        return true;
    }
    if (m_red)
    {
        m_red->Dequeued(true);
    }
    return false;
}

// ---- DlcpPort ------------------------------------------------------------------

/** A frame's arrival at the far port: one allocation, the frame inside (no std::function). */
class ArrivalEvent : public EventImpl
{
  public:
    ArrivalEvent(DlcpPort* port, Frame&& frame)
        : m_port(port),
          m_frame(std::move(frame))
    {
    }

  private:
    void Notify() override
    {
        m_port->Arrive(std::move(m_frame));
    }

    DlcpPort* m_port;
    Frame m_frame;
};

TypeId
DlcpPort::GetTypeId()
{
    static TypeId tid = TypeId("dlcpsim::DlcpPort").SetParent<NetDevice>().AddConstructor<DlcpPort>();
    return tid;
}

DlcpPort::DlcpPort() = default;
DlcpPort::~DlcpPort() = default;

void
DlcpPort::Configure(const DlcpSwitchConfig* config, uint32_t limit_packets, DataRate rate)
{
    m_queue = std::make_unique<PortQueue>(config, limit_packets);
    m_rate = rate;
    m_txTimes = {};
    m_address = Mac48Address::Allocate();
}

void
DlcpPort::Configure(std::unique_ptr<PortQueue> queue, DataRate rate)
{
    m_queue = std::move(queue);
    m_rate = rate;
    m_txTimes = {};
    m_address = Mac48Address::Allocate();
}

void
DlcpPort::Connect(Ptr<DlcpLink> link, DlcpPort* peer)
{
    m_link = link;
    m_peer = peer;
    m_peerContext = peer->GetNode() ? peer->GetNode()->GetId() : 0;
}

void
DlcpPort::Enqueue(Frame&& frame)
{
    // As TrafficControlLayer::Send: QueueDisc::Enqueue, then QueueDisc::Run.
    m_queue->Enqueue(std::move(frame));
    Run();
}

void
DlcpPort::Run()
{
    // QueueDisc::Run: hand packets to the device while its queue is not stopped.
    Frame f;
    while (!m_stopped && m_queue->Dequeue(f))
    {
        DeviceSend(std::move(f));
    }
}

void
DlcpPort::DeviceSend(Frame&& frame)
{
    // PointToPointNetDevice::Send into a one-packet queue: full now, so the queue stops.
    m_slot = std::move(frame);
    m_slotFull = true;
    m_stopped = true;
    if (!m_busy)
    {
        StartTransmit();
    }
}

void
DlcpPort::StartTransmit()
{
    // The transmitter takes the slot's packet; the queue's Dequeue trace schedules the wake-up
    // (NetDeviceQueue::PacketDequeued), then the device schedules its transmit end and the
    // channel the arrival, in that order, as ns-3 does.
    Frame f = std::move(m_slot);
    m_slotFull = false;
    m_busy = true;
    Simulator::ScheduleNow(&DlcpPort::Wake, this);
    Time tx = TxTime(f.Size() + PPP_HEADER_BYTES);
    Simulator::Schedule(tx, &DlcpPort::TransmitComplete, this);
    Simulator::ScheduleWithContext(m_peerContext, tx + m_link->Delay(), new ArrivalEvent(m_peer, std::move(f)));
}

Time
DlcpPort::TxTime(uint32_t bytes)
{
    TxTimeEntry& e = m_txTimes[bytes % m_txTimes.size()];
    if (e.bytes != bytes)
    {
        e.bytes = bytes;
        e.time = m_rate.CalculateBytesTxTime(bytes);
    }
    return e.time;
}

void
DlcpPort::TransmitComplete()
{
    m_busy = false;
    if (m_slotFull)
    {
        StartTransmit();
    }
}

void
DlcpPort::Wake()
{
    if (!m_slotFull)
    {
        m_stopped = false;
        Run();
    }
}

void
DlcpPort::Arrive(Frame&& frame)
{
    if (m_sink != nullptr)
    {
        m_sink->ReceiveFrame(this, std::move(frame));
    }
    else
    {
        DeliverUp(std::move(frame));
    }
}

void
DlcpPort::DeliverUp(Frame&& frame)
{
    if (m_rx.IsNull())
    {
        return;
    }
    Ptr<Packet> p = frame.l4;
    p->AddHeader(frame.ip);
    m_rx(this, p, IPV4_ETHERTYPE, m_peer != nullptr ? m_peer->GetAddress() : Address());
}

void
DlcpPort::DoDispose()
{
    m_link = nullptr;
    m_node = nullptr;
    m_peer = nullptr;
    m_sink = nullptr;
    m_slot = Frame();
    m_rx = MakeNullCallback<bool, Ptr<NetDevice>, Ptr<const Packet>, uint16_t, const Address&>();
    m_queue.reset();
    NetDevice::DoDispose();
}

bool
DlcpPort::Send(Ptr<Packet> packet, const Address&, uint16_t protocolNumber)
{
    if (protocolNumber != IPV4_ETHERTYPE)
    {
        return false;
    }
    Ptr<Packet> l4 = packet->Copy();
    Ipv4Header ip;
    l4->RemoveHeader(ip);
    Enqueue(Frame::From(ip, l4));
    return true;
}

bool
DlcpPort::SendFrom(Ptr<Packet> packet, const Address&, const Address& dest, uint16_t protocolNumber)
{
    return Send(packet, dest, protocolNumber);
}

void
DlcpPort::SetIfIndex(const uint32_t index)
{
    m_ifIndex = index;
}

uint32_t
DlcpPort::GetIfIndex() const
{
    return m_ifIndex;
}

Ptr<Channel>
DlcpPort::GetChannel() const
{
    return m_link;
}

void
DlcpPort::SetAddress(Address address)
{
    m_address = Mac48Address::ConvertFrom(address);
}

Address
DlcpPort::GetAddress() const
{
    return m_address;
}

bool
DlcpPort::SetMtu(const uint16_t mtu)
{
    m_mtu = mtu;
    return true;
}

uint16_t
DlcpPort::GetMtu() const
{
    return m_mtu;
}

bool
DlcpPort::IsLinkUp() const
{
    return m_link != nullptr;
}

void
DlcpPort::AddLinkChangeCallback(Callback<void>)
{
}

bool
DlcpPort::IsBroadcast() const
{
    return true;
}

Address
DlcpPort::GetBroadcast() const
{
    return Mac48Address::GetBroadcast();
}

bool
DlcpPort::IsMulticast() const
{
    return false;
}

Address
DlcpPort::GetMulticast(Ipv4Address) const
{
    return Mac48Address::GetMulticast(Ipv4Address("224.0.0.0"));
}

Address
DlcpPort::GetMulticast(Ipv6Address addr) const
{
    return Mac48Address::GetMulticast(addr);
}

bool
DlcpPort::IsBridge() const
{
    return false;
}

bool
DlcpPort::IsPointToPoint() const
{
    return true;
}

Ptr<Node>
DlcpPort::GetNode() const
{
    return m_node;
}

void
DlcpPort::SetNode(Ptr<Node> node)
{
    m_node = node;
}

bool
DlcpPort::NeedsArp() const
{
    return false;
}

void
DlcpPort::SetReceiveCallback(NetDevice::ReceiveCallback cb)
{
    m_rx = cb;
}

void
DlcpPort::SetPromiscReceiveCallback(NetDevice::PromiscReceiveCallback)
{
}

bool
DlcpPort::SupportsSendFrom() const
{
    return false;
}

// ---- DlcpLink -------------------------------------------------------------------

TypeId
DlcpLink::GetTypeId()
{
    static TypeId tid = TypeId("dlcpsim::DlcpLink").SetParent<Channel>().AddConstructor<DlcpLink>();
    return tid;
}

void
DlcpLink::Attach(Ptr<DlcpPort> a, Ptr<DlcpPort> b, Time delay)
{
    m_ends = {a, b};
    m_delay = delay;
    a->Connect(this, PeekPointer(b));
    b->Connect(this, PeekPointer(a));
}

std::size_t
DlcpLink::GetNDevices() const
{
    return 2;
}

Ptr<NetDevice>
DlcpLink::GetDevice(std::size_t i) const
{
    return m_ends.at(i);
}

void
DlcpLink::DoDispose()
{
    m_ends = {};
    Channel::DoDispose();
}

} // namespace dlcpsim
