#include "transport.h"

#include "ns3/log.h"
#include "ns3/packet.h"
#include "ns3/simulator.h"
#include "ns3/udp-socket-factory.h"

#include <algorithm>
#include <numeric>

namespace dlcpsim
{

using namespace ns3;

NS_LOG_COMPONENT_DEFINE("DlcpHost");
NS_OBJECT_ENSURE_REGISTERED(DlcpHost);
NS_OBJECT_ENSURE_REGISTERED(DlcpHeader);

// ---- DlcpHeader ------------------------------------------------------------

TypeId
DlcpHeader::GetTypeId()
{
    static TypeId tid = TypeId("dlcpsim::DlcpHeader").SetParent<Header>().AddConstructor<DlcpHeader>();
    return tid;
}

TypeId
DlcpHeader::GetInstanceTypeId() const
{
    return GetTypeId();
}

void
DlcpHeader::Print(std::ostream& os) const
{
    os << "DLCP type=" << int(PacketTypeOf(bytes)) << " seq=" << Get(DLCP_OFF_SEQ, DLCP_SIZE_SEQ);
}

uint32_t
DlcpHeader::GetSerializedSize() const
{
    return DLCP_HEADER_BYTES;
}

void
DlcpHeader::Serialize(Buffer::Iterator start) const
{
    start.Write(bytes, DLCP_HEADER_BYTES);
}

uint32_t
DlcpHeader::Deserialize(Buffer::Iterator start)
{
    start.Read(bytes, DLCP_HEADER_BYTES);
    return DLCP_HEADER_BYTES;
}

// ---- DlcpHost --------------------------------------------------------------

TypeId
DlcpHost::GetTypeId()
{
    static TypeId tid =
        TypeId("dlcpsim::DlcpHost").SetParent<Application>().SetGroupName("Applications").AddConstructor<DlcpHost>();
    return tid;
}

DlcpHost::DlcpHost() = default;
DlcpHost::~DlcpHost() = default;

void
DlcpHost::Configure(uint32_t rank,
                    const TransportParams& params,
                    const std::vector<Ipv4Address>* addresses,
                    std::vector<FlowRecord>* records,
                    HostCounters* counters,
                    uint64_t seed)
{
    m_rank = rank;
    m_params = params;
    m_addresses = addresses;
    m_records = records;
    m_counters = counters;
    m_rng.seed(seed);
    m_phaseRng.seed(seed ^ 0x9e3779b97f4a7c15ULL); // its own stream: the drop classes' draws stay as they were
    if (!params.host_rates.empty())
    {
        m_params.rate = params.host_rates.at(rank);
        m_params.host_rates.clear(); // one copy of every host's rule per host is 1,024 x 1,024 at scale
    }
    m_rate = m_params.rate.max_rate;
}

void
DlcpHost::StartApplication()
{
    if (m_output)
    {
        return; // packets go to and come from the host's port directly
    }
    m_socket = Socket::CreateSocket(GetNode(), UdpSocketFactory::GetTypeId());
    m_socket->Bind(InetSocketAddress(Ipv4Address::GetAny(), DLCP_UDP_PORT));
    m_socket->SetRecvCallback(MakeCallback(&DlcpHost::OnReceive, this));
}

void
DlcpHost::StopApplication()
{
    if (m_socket)
    {
        m_socket->Close();
        m_socket->SetRecvCallback(MakeNullCallback<void, Ptr<Socket>>());
    }
    for (auto& [key, m] : m_tx)
    {
        Simulator::Cancel(m->timer);
    }
}

void
DlcpHost::Send(uint32_t record, uint32_t dst, const SendSpec& spec, std::function<void()> on_acked)
{
    auto m = std::make_unique<TxMsg>();
    m->record = record;
    m->dst = dst;
    m->spec = spec;
    m->on_acked = std::move(on_acked);
    m->rto = m_params.initial_rto;
    m->sent_at = m_rate;
    uint8_t* h = m->hdr;
    DlcpHeader tmp;
    tmp.SetType(DLCP_TYPE_DATA);
    std::copy(tmp.bytes, tmp.bytes + DLCP_HEADER_BYTES, h);
    SetField(h, DLCP_OFF_KIND, DLCP_SIZE_KIND, spec.kind);
    SetField(h, DLCP_OFF_DTYPE, DLCP_SIZE_DTYPE, 0);
    SetField(h, DLCP_OFF_JOB_ID, DLCP_SIZE_JOB_ID, m_params.job_id);
    SetField(h, DLCP_OFF_SRC, DLCP_SIZE_SRC, m_rank);
    SetField(h, DLCP_OFF_TOKEN, DLCP_SIZE_TOKEN, m_params.token);
    SetField(h, DLCP_OFF_MSG_ID, DLCP_SIZE_MSG_ID, spec.msg_id);
    SetField(h, DLCP_OFF_ROUND, DLCP_SIZE_ROUND, spec.round);
    SetField(h, DLCP_OFF_LAYER, DLCP_SIZE_LAYER, spec.layer);
    SetField(h, DLCP_OFF_PKT_COUNT, DLCP_SIZE_PKT_COUNT, spec.shape.PktCount());
    SetField(h, DLCP_OFF_PRIORITY, DLCP_SIZE_PRIORITY, spec.priority);
    // Drop classes: the core ranks packets by gradient magnitude; without values the simulator
    // draws each packet's class with the policy's fractions (the same distribution).
    // A message whose bound covers less than one packet (a reliable one too) is sent all drop
    // class 0: it completes only whole (dlcp.policy.Policy.message_drop_classes).
    uint32_t n = spec.shape.PktCount();
    m->drop_class.assign(n, 0);
    if (spec.shape.MaxMissingElems() >= static_cast<int64_t>(spec.shape.elems_per_packet))
    {
        std::uniform_real_distribution<double> u(0.0, 1.0);
        for (uint32_t s = 0; s < n; ++s)
        {
            double x = u(m_rng);
            uint8_t c = 0;
            double acc = spec.drop_fractions[0];
            while (c + 1 < DLCP_NUM_DROP_CLASSES && x >= acc)
            {
                ++c;
                acc += spec.drop_fractions[c];
            }
            m->drop_class[s] = c;
        }
    }
    FlowRecord& rec = (*m_records)[record];
    rec.packets = n;
    uint64_t key = Key(m_rank, spec.msg_id);
    if (!m_params.srpt_thresholds.empty())
    {
        m->spec.priority = SrptClass(static_cast<uint64_t>(n) * m_params.payload_bytes); // shortest first here too
    }
    m_firstPass[std::min<uint32_t>(spec.priority, DLCP_NUM_PRIORITY_CLASSES - 1)].push_back(key);
    TxMsg& sent = *m;
    m_tx[key] = std::move(m);
    SetActive(sent, true);
    Kick();
}

void
DlcpHost::Expect(uint32_t record, uint32_t src, uint32_t msg_id, const MessageShape& shape,
                 std::function<void()> on_complete)
{
    auto r = std::make_unique<RxMsg>();
    r->record = record;
    r->src = src;
    r->state = MessageState(shape);
    r->on_complete = std::move(on_complete);
    m_rx[Key(src, msg_id)] = std::move(r);
}

void
DlcpHost::Kick()
{
    Time now = Simulator::Now();
    if (m_txScheduled)
    {
        // Without shares the scheduled loop is the next packet's time. With them it may be a wait for a busy
        // receiver's pacer, which a message to another receiver need not wait for.
        if (!m_shares || m_txAt <= std::max(m_nextTx, now))
        {
            return;
        }
        Simulator::Cancel(m_txEvent);
    }
    m_txScheduled = true;
    if (m_nextTx <= now && m_params.phase_jitter)
    {
        // An idle sender starts at a random point of its first packet's interval: real hosts are not
        // phase-locked, but simulated ones with the same compute start a layer's pushes at the same
        // nanosecond, and paced at the same rate they stay aligned, every packet a burst of all of them.
        double interval = (m_params.payload_bytes + DLCP_HEADER_BYTES + UDP_HEADER_BYTES +
                           m_params.wire_overhead) / m_rate;
        m_nextTx = now + Seconds(std::uniform_real_distribution<double>(0.0, interval)(m_phaseRng));
    }
    m_txAt = m_nextTx > now ? m_nextTx : now;
    m_txEvent = Simulator::Schedule(m_txAt - now, &DlcpHost::TxLoop, this);
}

void
DlcpHost::SetActive(TxMsg& m, bool active)
{
    if (m_shares == nullptr || m.active == active)
    {
        return;
    }
    m.active = active;
    if (active)
    {
        m_shares->Start(m_rank, m.dst);
    }
    else
    {
        m_shares->Stop(m_rank, m.dst);
    }
}

bool
DlcpHost::DestReady(uint32_t dst, Time now, Time& wake) const
{
    auto it = m_destNext.find(dst);
    if (it == m_destNext.end() || it->second <= now)
    {
        return true;
    }
    wake = std::min(wake, it->second);
    return false;
}

void
DlcpHost::TxLoopActive()
{
    m_txScheduled = false;
    Time now = Simulator::Now();
    Time wake = Time::Max();
    for (auto i = m_retxFifo.begin(); i != m_retxFifo.end();)
    {
        auto it = m_tx.find(*i);
        if (it == m_tx.end() || it->second->stopped || it->second->retx.empty())
        {
            if (it != m_tx.end())
            {
                it->second->retx_queued = false;
            }
            i = m_retxFifo.erase(i);
            continue;
        }
        TxMsg& m = *it->second;
        if (!DestReady(m.dst, now, wake))
        {
            ++i;
            continue;
        }
        uint32_t seq = m.retx.front();
        m.retx.pop_front();
        SendData(m, seq, true, static_cast<uint64_t>(m.retx.size() + 1) * m_params.payload_bytes);
        if (m.retx.empty())
        {
            m_retxFifo.erase(i);
            m.retx_queued = false;
            m.rto = m_params.initial_rto;
            SetActive(m, false);
            Probe(m);
        }
        Kick();
        return;
    }
    for (uint32_t q = DLCP_NUM_PRIORITY_CLASSES; q-- > 0;)
    {
        auto& fifo = m_firstPass[q];
        for (auto i = fifo.begin(); i != fifo.end();)
        {
            auto it = m_tx.find(*i);
            if (it == m_tx.end() || it->second->passed)
            {
                i = fifo.erase(i);
                continue;
            }
            TxMsg& m = *it->second;
            if (!DestReady(m.dst, now, wake))
            {
                ++i;
                continue;
            }
            uint32_t seq = m.next_seq++;
            SendData(m, seq, false, static_cast<uint64_t>(m.spec.shape.PktCount() - seq) * m_params.payload_bytes);
            if (m.next_seq == m.spec.shape.PktCount())
            {
                m.passed = true;
                fifo.erase(i);
                SetActive(m, !m.retx.empty());
                Probe(m);
            }
            Kick();
            return;
        }
    }
    if (wake != Time::Max())
    {
        m_txScheduled = true;
        m_txAt = wake;
        m_txEvent = Simulator::Schedule(wake - now, &DlcpHost::TxLoop, this);
    }
}

void
DlcpHost::Charge(uint32_t wire_bytes, uint32_t dst)
{
    Time now = Simulator::Now();
    if (m_nextTx < now)
    {
        m_nextTx = now;
    }
    double interval = wire_bytes / m_rate;
    m_nextTx += Seconds(interval);
    if (m_shares)
    {
        if (int64_t bps = m_shares->Rate(m_rank, dst))
        {
            double to_dst = wire_bytes * 8.0 / static_cast<double>(bps);
            Time& next = m_destNext[dst];
            next = std::max(next, now) + Seconds(to_dst);
            interval = std::max(interval, to_dst);
        }
    }
    if (m_params.line_rate > 0)
    {
        double excess = std::max(0.0, interval - wire_bytes / m_params.line_rate);
        m_counters->pacing_excess_s += excess;
        m_paceExcess += excess;
    }
}

void
DlcpHost::TxLoop()
{
    if (m_shares)
    {
        TxLoopActive();
        return;
    }
    m_txScheduled = false;
    while (!m_retxFifo.empty())
    {
        auto it = m_tx.find(m_retxFifo.front());
        if (it == m_tx.end() || it->second->stopped || it->second->retx.empty())
        {
            if (it != m_tx.end())
            {
                it->second->retx_queued = false;
            }
            m_retxFifo.pop_front();
            continue;
        }
        TxMsg& m = *it->second;
        uint32_t seq = m.retx.front();
        m.retx.pop_front();
        SendData(m, seq, true, static_cast<uint64_t>(m.retx.size() + 1) * m_params.payload_bytes);
        if (m.retx.empty())
        {
            m_retxFifo.pop_front();
            m.retx_queued = false;
            m.rto = m_params.initial_rto;
            Probe(m); // ask what is still missing once these had time to arrive
        }
        Kick();
        return;
    }
    for (uint32_t q = DLCP_NUM_PRIORITY_CLASSES; q-- > 0;)
    {
        auto& fifo = m_firstPass[q];
        while (!fifo.empty())
        {
            auto it = m_tx.find(fifo.front());
            if (it == m_tx.end() || it->second->passed)
            {
                fifo.pop_front();
                continue;
            }
            TxMsg& m = *it->second;
            uint32_t seq = m.next_seq++;
            SendData(m, seq, false, static_cast<uint64_t>(m.spec.shape.PktCount() - seq) * m_params.payload_bytes);
            if (m.next_seq == m.spec.shape.PktCount())
            {
                m.passed = true;
                fifo.pop_front();
                Probe(m); // the receiver cannot know the pass is over if LAST was lost
            }
            Kick();
            return;
        }
    }
}

uint8_t
DlcpHost::SrptClass(uint64_t remaining) const
{
    uint32_t above = 0;
    for (uint64_t t : m_params.srpt_thresholds)
    {
        above += remaining >= t ? 1 : 0;
    }
    return static_cast<uint8_t>(above >= m_params.top_data_class ? 0 : m_params.top_data_class - above);
}

void
DlcpHost::SendData(TxMsg& m, uint32_t seq, bool retx, uint64_t remaining)
{
    const MessageShape& s = m.spec.shape;
    uint32_t len = static_cast<uint32_t>(s.ElemsOf(seq) * m_params.elem_size);
    DlcpHeader h;
    std::copy(m.hdr, m.hdr + DLCP_HEADER_BYTES, h.bytes);
    uint8_t flags = 0;
    if (retx)
    {
        flags |= DLCP_FLAG_RETX;
    }
    else if (seq + 1 == s.PktCount())
    {
        flags |= DLCP_FLAG_LAST;
    }
    h.Set(DLCP_OFF_LENGTH, DLCP_SIZE_LENGTH, len);
    h.Set(DLCP_OFF_FLAGS, DLCP_SIZE_FLAGS, flags);
    uint8_t priority = retx ? m.spec.control_priority : m.spec.priority;
    if (!m_params.srpt_thresholds.empty())
    {
        priority = SrptClass(remaining); // pFabric: retransmissions too, by what is left
    }
    h.Set(DLCP_OFF_PRIORITY, DLCP_SIZE_PRIORITY, priority);
    h.Set(DLCP_OFF_DROP_CLASS, DLCP_SIZE_DROP_CLASS, retx ? 0 : m.drop_class[seq]);
    h.Set(DLCP_OFF_SEQ, DLCP_SIZE_SEQ, seq);
    h.Set(DLCP_OFF_OFFSET, DLCP_SIZE_OFFSET, seq * s.elems_per_packet);
    Ptr<Packet> p = Create<Packet>(len);
    p->AddHeader(h);
    Charge(len + DLCP_HEADER_BYTES + UDP_HEADER_BYTES + m_params.wire_overhead, m.dst);
    Emit(p, m.dst);
    m_counters->data_sent++;
    if (retx)
    {
        (*m_records)[m.record].retx++;
    }
}

void
DlcpHost::SendControl(const uint8_t* tmpl, uint8_t type, uint32_t dst, uint32_t seq, uint32_t offset, uint8_t flags,
                      const uint8_t* payload, uint32_t len)
{
    DlcpHeader h;
    std::copy(tmpl, tmpl + DLCP_HEADER_BYTES, h.bytes);
    h.SetType(type);
    h.Set(DLCP_OFF_LENGTH, DLCP_SIZE_LENGTH, len);
    h.Set(DLCP_OFF_FLAGS, DLCP_SIZE_FLAGS, flags);
    if (type != DLCP_TYPE_PROBE)
    {
        // A PROBE keeps its data's priority (the template's), as the host's does (docs/transport.md): in the
        // control class it overtook its own message's queued tail, whose packets the reply then named missing.
        h.Set(DLCP_OFF_PRIORITY, DLCP_SIZE_PRIORITY, DLCP_CONTROL_PRIORITY);
    }
    h.Set(DLCP_OFF_DROP_CLASS, DLCP_SIZE_DROP_CLASS, 0);
    h.Set(DLCP_OFF_SEQ, DLCP_SIZE_SEQ, seq);
    h.Set(DLCP_OFF_OFFSET, DLCP_SIZE_OFFSET, offset);
    Ptr<Packet> p = len ? Create<Packet>(payload, len) : Create<Packet>();
    p->AddHeader(h);
    Emit(p, dst);
    m_counters->control_sent++;
}

void
DlcpHost::Probe(TxMsg& m)
{
    m.pending.clear(); // chunks answering earlier probes are stale now
    m.probe_id++;
    (*m_records)[m.record].probes++;
    SendControl(m.hdr, DLCP_TYPE_PROBE, m.dst, m.probe_id, 0, 0, nullptr, 0);
    Simulator::Cancel(m.timer);
    m.timer = Simulator::Schedule(Seconds(m.rto), &DlcpHost::OnTimer, this, Key(m_rank, m.spec.msg_id));
}

void
DlcpHost::OnTimer(uint64_t key)
{
    auto it = m_tx.find(key);
    if (it == m_tx.end() || it->second->stopped)
    {
        return;
    }
    TxMsg& m = *it->second;
    m.rto = std::min(2 * m.rto, m_params.max_rto);
    Probe(m);
}

void
DlcpHost::Emit(Ptr<Packet> p, uint32_t dst)
{
    if (m_output)
    {
        m_output(p, dst);
        return;
    }
    m_socket->SendTo(p, 0, InetSocketAddress((*m_addresses)[dst], DLCP_UDP_PORT));
}

void
DlcpHost::OnReceive(Ptr<Socket> socket)
{
    Ptr<Packet> p;
    Address from;
    while ((p = socket->RecvFrom(from)))
    {
        uint8_t h[DLCP_HEADER_BYTES];
        Deliver(h, p->CopyData(h, DLCP_HEADER_BYTES), p, 0);
    }
}

void
DlcpHost::Deliver(const uint8_t* h, uint32_t n, Ptr<Packet> p, uint32_t header_at)
{
    if (n < DLCP_HEADER_BYTES || VersionOf(h) != DLCP_VERSION)
    {
        m_counters->unknown++; // the core drops and counts it (TRUNCATED / BAD_VERSION)
        return;
    }
    switch (PacketTypeOf(h))
    {
    case DLCP_TYPE_DATA:
        OnData(h, false);
        break;
    case DLCP_TYPE_TRIMMED:
        OnData(h, true);
        break;
    case DLCP_TYPE_PROBE:
        m_counters->control_received++;
        OnProbe(h);
        break;
    case DLCP_TYPE_BITMAP:
    case DLCP_TYPE_STOP:
        m_counters->control_received++;
        p->RemoveAtStart(header_at + DLCP_HEADER_BYTES);
        OnReply(h, p);
        break;
    default:
        m_counters->unknown++;
    }
}

void
DlcpHost::OnData(const uint8_t* h, bool trimmed)
{
    if (trimmed)
    {
        m_counters->trimmed_received++;
    }
    else
    {
        m_counters->data_received++;
    }
    uint32_t src = GetField(h, DLCP_OFF_SRC, DLCP_SIZE_SRC);
    uint32_t msg_id = GetField(h, DLCP_OFF_MSG_ID, DLCP_SIZE_MSG_ID);
    auto it = m_rx.find(Key(src, msg_id));
    if (it == m_rx.end())
    {
        m_counters->unknown++;
        return;
    }
    RxMsg& r = *it->second;
    uint32_t seq = GetField(h, DLCP_OFF_SEQ, DLCP_SIZE_SEQ);
    bool last = (h[DLCP_OFF_FLAGS] & DLCP_FLAG_LAST) != 0;
    Accept a = trimmed ? r.state.OnTrimmed(seq, last) : r.state.OnData(seq, last);
    if (trimmed && a == Accept::OK)
    {
        (*m_records)[r.record].trimmed++;
    }
    if (a == Accept::DUPLICATE)
    {
        m_counters->duplicates++;
    }
    else if (a == Accept::LATE)
    {
        m_counters->late++;
    }
    if (!r.state.done && r.state.Ready())
    {
        Complete(r, 0);
    }
}

void
DlcpHost::OnProbe(const uint8_t* h)
{
    uint32_t src = GetField(h, DLCP_OFF_SRC, DLCP_SIZE_SRC);
    uint32_t msg_id = GetField(h, DLCP_OFF_MSG_ID, DLCP_SIZE_MSG_ID);
    uint32_t probe_id = GetField(h, DLCP_OFF_SEQ, DLCP_SIZE_SEQ);
    auto it = m_rx.find(Key(src, msg_id));
    if (it == m_rx.end())
    {
        m_counters->unknown++;
        return;
    }
    RxMsg& r = *it->second;
    if (r.state.done)
    {
        SendBitmap(r, DLCP_TYPE_STOP, probe_id);
        return;
    }
    r.state.OnProbe();
    if (r.state.Ready())
    {
        Complete(r, probe_id);
    }
    else
    {
        SendBitmap(r, DLCP_TYPE_BITMAP, probe_id);
    }
}

void
DlcpHost::Complete(RxMsg& r, uint32_t probe_id)
{
    r.state.Finish();
    FlowRecord& rec = (*m_records)[r.record];
    rec.end = Simulator::Now().GetSeconds();
    rec.lost_elems = static_cast<uint64_t>(r.state.lost_elems);
    SendBitmap(r, DLCP_TYPE_STOP, probe_id);
    if (r.on_complete)
    {
        auto cb = std::move(r.on_complete);
        r.on_complete = nullptr;
        cb();
    }
}

void
DlcpHost::SendBitmap(RxMsg& r, uint8_t type, uint32_t probe_id)
{
    // The reply names the message by its identity (the sender matches on it alone).
    const FlowRecord& rec = (*m_records)[r.record];
    DlcpHeader tmpl;
    tmpl.Set(DLCP_OFF_JOB_ID, DLCP_SIZE_JOB_ID, m_params.job_id);
    tmpl.Set(DLCP_OFF_SRC, DLCP_SIZE_SRC, r.src);
    tmpl.Set(DLCP_OFF_TOKEN, DLCP_SIZE_TOKEN, m_params.token);
    tmpl.Set(DLCP_OFF_MSG_ID, DLCP_SIZE_MSG_ID, rec.id);
    tmpl.Set(DLCP_OFF_PKT_COUNT, DLCP_SIZE_PKT_COUNT, r.state.shape.PktCount());
    if (type == DLCP_TYPE_STOP && r.state.lost_elems == 0)
    {
        SendControl(tmpl.bytes, type, r.src, probe_id, 0, DLCP_FLAG_FINAL, nullptr, 0);
        return;
    }
    const std::vector<uint8_t>& got = r.state.received;
    std::vector<uint8_t> bits((got.size() + 7) / 8, 0);
    for (size_t i = 0; i < got.size(); ++i)
    {
        if (got[i])
        {
            bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8)); // LSB first
        }
    }
    uint32_t step = m_params.payload_bytes;
    for (size_t start = 0; start < bits.size(); start += step)
    {
        uint32_t len = static_cast<uint32_t>(std::min<size_t>(step, bits.size() - start));
        uint8_t flags = start + step >= bits.size() ? DLCP_FLAG_FINAL : 0;
        SendControl(tmpl.bytes, type, r.src, probe_id, static_cast<uint32_t>(start * 8), flags, bits.data() + start,
                    len);
    }
}

void
DlcpHost::OnReply(const uint8_t* h, Ptr<Packet> p)
{
    uint32_t src = GetField(h, DLCP_OFF_SRC, DLCP_SIZE_SRC);
    uint32_t msg_id = GetField(h, DLCP_OFF_MSG_ID, DLCP_SIZE_MSG_ID);
    auto it = m_tx.find(Key(src, msg_id));
    if (src != m_rank || it == m_tx.end())
    {
        m_counters->unknown++;
        return;
    }
    TxMsg& m = *it->second;
    if (m.stopped)
    {
        return;
    }
    uint32_t seq = GetField(h, DLCP_OFF_SEQ, DLCP_SIZE_SEQ);
    uint8_t flags = h[DLCP_OFF_FLAGS];
    if (PacketTypeOf(h) == DLCP_TYPE_STOP)
    {
        if (GetField(h, DLCP_OFF_OFFSET, DLCP_SIZE_OFFSET) != 0 && !(flags & DLCP_FLAG_FINAL))
        {
            return; // a later chunk of a STOP's bitmap: the first one already stopped us
        }
        m.stopped = true;
        SetActive(m, false);
        Simulator::Cancel(m.timer);
        if (!m.fed_back)
        {
            m.fed_back = true;
            Feedback(0.0, m.sent_at);
        }
        (*m_records)[m.record].acked = Simulator::Now().GetSeconds();
        if (m.on_acked)
        {
            auto cb = std::move(m.on_acked);
            m.on_acked = nullptr;
            cb();
        }
        return;
    }
    if (seq < m.probe_id || !m.passed)
    {
        return; // stale, or not asked for yet: our probe will ask
    }
    std::vector<uint8_t> chunk(p->GetSize());
    p->CopyData(chunk.data(), chunk.size());
    m.pending.emplace_back(GetField(h, DLCP_OFF_OFFSET, DLCP_SIZE_OFFSET), std::move(chunk));
    if (!(flags & DLCP_FLAG_FINAL))
    {
        return;
    }
    const MessageShape& s = m.spec.shape;
    uint32_t n = s.PktCount();
    std::vector<uint8_t> have(n, 0);
    for (auto& [offset, bits] : m.pending)
    {
        for (uint32_t i = 0; i < bits.size() * 8 && offset + i < n; ++i)
        {
            have[offset + i] = (bits[i / 8] >> (i % 8)) & 1;
        }
    }
    m.pending.clear();
    std::vector<uint32_t> missing;
    for (uint32_t i = 0; i < n; ++i)
    {
        if (!have[i])
        {
            missing.push_back(i);
        }
    }
    if (!m.fed_back)
    {
        m.fed_back = true;
        Feedback(FirstPassLoss(missing, n), m.sent_at); // the first pass's verdict, as the host's (rate_control.h)
    }
    // What to retransmit (host/endpoint.py _choose_retransmit): the missing packets beyond
    // what the bound may leave out, plus a margin of a quarter, protected classes first.
    int64_t allowed = s.MaxMissingElems() / s.elems_per_packet;
    int64_t need = static_cast<int64_t>(missing.size()) - allowed;
    if (allowed > 0 && need < static_cast<int64_t>(missing.size()))
    {
        if (need <= 0)
        {
            missing.clear();
        }
        else
        {
            need = std::min<int64_t>(missing.size(), need + std::max<int64_t>(2, need / 4));
            std::stable_sort(missing.begin(), missing.end(), [&m](uint32_t a, uint32_t b) {
                return m.drop_class[a] < m.drop_class[b];
            });
            missing.resize(need);
            std::sort(missing.begin(), missing.end());
        }
    }
    if (missing.empty())
    {
        m.rto = m_params.initial_rto;
        Probe(m);
        return;
    }
    if (!m_params.pace_retx)
    {
        uint64_t left = static_cast<uint64_t>(missing.size()) * m_params.payload_bytes;
        for (uint32_t seq2 : missing)
        {
            SendData(m, seq2, true, left);
            left -= m_params.payload_bytes;
        }
        m.rto = m_params.initial_rto;
        Probe(m);
        return;
    }
    // Paced by TxLoop; the probe timer waits until the last of them has gone (TxLoop probes then).
    Simulator::Cancel(m.timer);
    m.retx.assign(missing.begin(), missing.end());
    SetActive(m, true);
    if (!m.retx_queued)
    {
        m.retx_queued = true;
        m_retxFifo.push_back(Key(m_rank, m.spec.msg_id));
    }
    Kick();
}

void
DlcpHost::Feedback(double loss, double sent_at)
{
    m_rate = m_params.rate.Next(m_rate, loss, sent_at); // the core's rule (rate_control.h)
}

} // namespace dlcpsim
