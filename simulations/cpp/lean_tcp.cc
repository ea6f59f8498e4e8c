// The lean TCP (lean_tcp.h). Each rule below is the one of ns-3's TcpSocketBase, TcpTxBuffer,
// TcpRxBuffer, TcpPrrRecovery, TcpNewReno / TcpLinuxReno / TcpDctcp and RttMeanDeviation at the
// baselines' settings, named after the ns-3 function that holds it, so that the two can be read
// side by side; tests/test_sim_lean_tcp.py compares the two on the same scenarios.
#include "lean_tcp.h"

#include "wire.h"

#include "ns3/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace dlcpsim
{

using namespace ns3;

namespace
{

// TCP's flags, as in its header.
constexpr uint8_t SYN = 0x02;
constexpr uint8_t ACK = 0x10;
constexpr uint8_t ECE = 0x40;
constexpr uint8_t CWR = 0x80;

constexpr uint16_t EPHEMERAL_FIRST = 49152; // ns-3's Ipv4EndPointDemux counts up from here
constexpr uint32_t DUP_THRESH = 3;          // ReTxThreshold
constexpr uint32_t MAX_SACK_BLOCKS_SENT = 3; // what fits beside the timestamp in 40 bytes of options
constexpr uint32_t SACK_BLOCKS_CARRIED = 2;  // what the frame's head carries (the third only sizes the ACK)
constexpr uint32_t SACK_LIST_KEPT = 4;       // TcpRxBuffer keeps 4
constexpr double DCTCP_G = 0.0625;          // TcpDctcp's DctcpShiftG
constexpr uint32_t TCP_HEADER = 20;
static_assert(TCP_DELACK_COUNT == 1, "the lean TCP acknowledges every segment at once");

/** Bytes of TCP options, padded to 4: the timestamp (10) on every segment, and on a SYN window
 *  scale (3) and SACK permitted (2), or on an ACK `sacks` SACK blocks (2 + 8 each). */
uint32_t
OptionBytes(bool syn, uint32_t sacks)
{
    uint32_t n = 10 + (syn ? 5 : 0) + (sacks > 0 ? 2 + 8 * sacks : 0);
    return (n + 3) & ~3U;
}

/** The head of a lean TCP frame: the ports where a TCP header has them (the fabric's hash reads them),
 *  then the fields the connection's ends read, in host order. */
struct Head
{
    uint32_t seq = 0;
    uint32_t ack = 0;
    uint32_t tsval = 0;
    uint32_t tsecr = 0;
    uint16_t len = 0;
    uint8_t flags = 0;
    uint8_t nsack = 0;
    uint32_t end = 0; // the receiving end (what ns-3's demultiplexer finds from addresses and ports)
    std::array<std::pair<uint32_t, uint32_t>, SACK_BLOCKS_CARRIED> sack{};
};
static_assert(4 + sizeof(Head) <= MIN_DLCP_UDP_LENGTH, "the head of a frame carries a lean TCP segment");

/** A 64-bit stream offset from its low 32 bits, near `ref` (as TCP's sequence arithmetic). */
uint64_t
Unwrap(uint32_t v, uint64_t ref)
{
    return ref + static_cast<int64_t>(static_cast<int32_t>(v - static_cast<uint32_t>(ref)));
}

/** TcpOptionTS::NowToTsValue: milliseconds (in time steps: Time::GetMilliSeconds divides in 128 bits). */
uint32_t
NowTs()
{
    static const int64_t steps_per_ms = MilliSeconds(1).GetTimeStep();
    return static_cast<uint32_t>(Simulator::Now().GetTimeStep() / steps_per_ms);
}

} // namespace

/** One end of a connection: the sender of one direction of its stream and the receiver of the other. */
struct LeanTcp::End
{
    enum class Cong : uint8_t
    {
        OPEN,
        DISORDER,
        CWR,
        RECOVERY,
        LOSS
    };
    enum class SendEcn : uint8_t
    {
        IDLE,
        ECE_RCVD,
        CWR_SENT
    };

    struct Item // TcpTxItem
    {
        uint64_t start;
        uint32_t len;
        bool sacked = false;
        bool lost = false;
        bool retrans = false;
        bool delivered = false; // counted in `delivered` (TcpRateOps), when SACKed or acknowledged
    };

    struct RttHistory
    {
        uint64_t seq;
        uint32_t count;
    };

    uint32_t index = 0; // in m_ends
    uint32_t peer = 0;
    uint32_t host = 0;
    uint32_t peer_host = 0;
    uint16_t port = 0;
    uint16_t peer_port = 0;
    bool established = false;

    // ---- sending: the messages handed to this end, and TcpSocketBase's sender state
    MessageStream out;
    uint64_t una = 0;  // SND.UNA: TcpTxBuffer::HeadSequence
    uint64_t nxt = 0;  // m_nextTxSequence
    uint64_t high = 0; // m_highTxMark
    std::deque<Item> sent;
    uint64_t sent_bytes = 0, sacked_out = 0, lost_out = 0, retrans_out = 0;
    bool sack_seen = false;
    uint64_t highest_sack = 0; // start of the highest SACKed item
    uint64_t delivered = 0;
    uint32_t cwnd = 0, ssthresh = UINT32_MAX;
    uint64_t rwnd = 65535; // the peer's window: a SYN's, unscaled, until its first scaled one
    Cong cong = Cong::OPEN;
    uint32_t dupacks = 0;
    uint64_t recover = 0;
    bool recover_active = false;
    bool first_partial_ack = true;
    uint32_t acked_not_processed = 0;
    uint32_t cwnd_cnt = 0; // TcpLinuxReno
    // TcpPrrRecovery
    uint64_t prr_out = 0, prr_delivered = 0, recovery_flight = 0;
    bool retrans_data_acked = false;
    // ECN, the sender's side (TcpSocketBase), and TcpDctcp's estimate
    SendEcn ecn = SendEcn::IDLE;
    uint64_t ecn_echo_seq = 0, ecn_cwr_seq = 0;
    double alpha = 1.0; // DctcpAlphaOnInit
    uint64_t acked_ecn = 0, acked_total = 0;
    uint64_t alpha_next = 0;
    bool alpha_next_set = false;
    // RTT (RttMeanDeviation, ns) and the retransmission timer
    int64_t srtt = 0, rttvar = 0;
    uint32_t rtt_samples = 0;
    Time rto;
    std::deque<RttHistory> history;
    bool timer_armed = false;
    Time deadline;
    bool timer_pending = false;
    Time timer_at;

    // ---- receiving
    uint64_t rcv_nxt = 0;
    std::map<uint64_t, uint64_t> ooo;                // out-of-order data: start -> end
    std::deque<std::pair<uint64_t, uint64_t>> sacks; // TcpRxBuffer's SACK list, most recent first
    uint32_t ts_recent = 0, ts_echo = 0;
    uint64_t high_tx_ack = 0;
    bool ce = false; // the last data segment was CE-marked: ACKs echo ECE (DCTCP's receiver)
    uint64_t ecn_ce_seq = 0;
    MessageStream* in = nullptr; // the peer's outgoing stream

    uint64_t BytesInFlight() const
    {
        return sent_bytes - sacked_out - lost_out + retrans_out;
    }
};

using End = LeanTcp::End;

/** What every end does, with the connections' settings; the state is the End's. */
struct LeanTcp::Machine
{
    Machine(const LeanTcpParams& params, std::vector<uint32_t> addresses, Output output, Completed completed)
        : p(params),
          min_rto(Seconds(params.min_rto_s)),
          addresses(std::move(addresses)),
          output(std::move(output)),
          completed(std::move(completed))
    {
    }

    LeanTcpParams p;
    Time min_rto;
    std::vector<uint32_t> addresses;
    Output output;
    Completed completed;
    std::vector<std::unique_ptr<End>> ends; // 2c: the end that connected, 2c + 1: the end that accepted

    // ---- frames

    void Emit(End& e, uint8_t flags, uint64_t seq, uint32_t len, uint32_t sacks_sized)
    {
        Frame f;
        f.ip.SetSource(Ipv4Address(addresses[e.host]));
        f.ip.SetDestination(Ipv4Address(addresses[e.peer_host]));
        f.ip.SetProtocol(IPPROTO_TCP);
        f.ip.SetTtl(64);
        f.ip.SetPayloadSize(TCP_HEADER + OptionBytes(flags & SYN, sacks_sized) + len);
        f.ip.SetEcn(p.dctcp ? Ipv4Header::ECN_ECT0 : Ipv4Header::ECN_NotECT);
        SetField(f.head, 0, 2, e.port);
        SetField(f.head, 2, 2, e.peer_port);
        Head h;
        h.seq = static_cast<uint32_t>(seq);
        h.ack = static_cast<uint32_t>(e.rcv_nxt);
        h.tsval = NowTs();
        h.tsecr = e.ts_echo;
        h.len = static_cast<uint16_t>(len);
        h.flags = flags;
        h.end = e.peer;
        if ((flags & ACK) && len == 0 && !(flags & SYN))
        {
            // A pure ACK: SACK blocks (data segments carry only the timestamp, as ns-3's).
            e.high_tx_ack = std::max(e.high_tx_ack, e.rcv_nxt);
            h.nsack = static_cast<uint8_t>(std::min<size_t>(e.sacks.size(), SACK_BLOCKS_CARRIED));
            for (uint32_t i = 0; i < h.nsack; ++i)
            {
                h.sack[i] = {static_cast<uint32_t>(e.sacks[i].first), static_cast<uint32_t>(e.sacks[i].second)};
            }
        }
        std::memcpy(f.head + 4, &h, sizeof(h));
        f.head_len = MIN_DLCP_UDP_LENGTH;
        output(e.host, std::move(f));
    }

    /** TcpSocketBase::SendEmptyPacket(ACK [| ECE]). */
    void SendAck(End& e)
    {
        uint8_t flags = ACK | (e.ce ? ECE : 0);
        Emit(e, flags, e.nxt, 0, static_cast<uint32_t>(std::min<size_t>(e.sacks.size(), MAX_SACK_BLOCKS_SENT)));
    }

    // ---- connection set-up (three segments; ns-3's first RTT sample comes from the SYN's timestamp)

    void Connect(End& e)
    {
        Emit(e, SYN, 0, 0, 0);
        e.history.push_back({0, 0});
    }

    void Established(End& e)
    {
        e.established = true;
        e.cwnd = p.initial_cwnd * p.segment;
        e.ssthresh = UINT32_MAX;
        SendPendingData(e);
    }

    // ---- the retransmission timer: armed and re-armed per ACK, one pending event at a time

    void Arm(End& e)
    {
        e.timer_armed = true;
        e.deadline = Simulator::Now() + e.rto;
        if (!e.timer_pending || e.timer_at > e.deadline)
        {
            e.timer_pending = true;
            e.timer_at = e.deadline;
            Simulator::Schedule(e.rto, &LeanTcp::Machine::OnTimer, this, e.index);
        }
    }

    void OnTimer(uint32_t index)
    {
        End& e = *ends[index];
        if (!e.timer_pending || Simulator::Now() != e.timer_at)
        {
            return; // superseded by an earlier one
        }
        e.timer_pending = false;
        if (!e.timer_armed)
        {
            return;
        }
        if (Simulator::Now() < e.deadline)
        {
            e.timer_pending = true;
            e.timer_at = e.deadline;
            Simulator::Schedule(e.deadline - Simulator::Now(), &LeanTcp::Machine::OnTimer, this, index);
            return;
        }
        e.timer_armed = false;
        RetxTimeout(e);
    }

    /** What TcpSocketBase::AdvertisedWindowSize gives for an empty buffer: the buffer, in units of its window
     *  scale. */
    uint64_t ScaledWindow() const
    {
        uint32_t shift = 0;
        while (shift < 14 && (uint64_t{p.buffer} >> shift) > 65535)
        {
            ++shift;
        }
        return std::min<uint64_t>(uint64_t{p.buffer} >> shift, 65535) << shift;
    }

    Time RtoFromEstimate(const End& e) const
    {
        int64_t ns = e.srtt + std::max<int64_t>(TCP_CLOCK_GRANULARITY_NS, 4 * e.rttvar);
        return std::max(NanoSeconds(ns), min_rto);
    }

    /** RttMeanDeviation::Measurement (alpha 1/8, beta 1/4: its integer update). */
    void Measure(End& e, int64_t m)
    {
        if (e.rtt_samples++ == 0)
        {
            e.srtt = m;
            e.rttvar = m / 2;
            return;
        }
        int64_t delta = m - e.srtt;
        e.srtt = ((e.srtt << 3) + delta) >> 3;
        delta = std::abs(delta) - e.rttvar;
        e.rttvar = ((e.rttvar << 2) + delta) >> 2;
    }

    /** TcpSocketBase::EstimateRtt with timestamps: the elapsed milliseconds since the echoed value, 1 us if none. */
    void EstimateRtt(End& e, uint64_t ack, uint32_t tsecr)
    {
        if (e.history.empty())
        {
            return;
        }
        const End::RttHistory& first = e.history.front();
        if (ack < first.seq + first.count)
        {
            return;
        }
        uint32_t now = NowTs();
        int64_t m = now > tsecr ? static_cast<int64_t>(now - tsecr) * 1000000 : 0;
        if (m == 0)
        {
            m = 1000;
        }
        while (!e.history.empty() && e.history.front().seq + e.history.front().count <= ack)
        {
            e.history.pop_front();
        }
        Measure(e, m);
        e.rto = RtoFromEstimate(e);
    }

    // ---- the sender's scoreboard (TcpTxBuffer)

    /** TcpTxBuffer::Update: SACK blocks onto the sent items; the bytes newly SACKed. */
    uint64_t UpdateSacks(End& e, const Head& h, uint64_t ack)
    {
        uint64_t newly = 0;
        for (uint32_t b = 0; b < h.nsack; ++b)
        {
            uint64_t first = Unwrap(h.sack[b].first, ack), second = Unwrap(h.sack[b].second, ack);
            if (e.una + e.sent_bytes < first)
            {
                break;
            }
            for (End::Item& it : e.sent)
            {
                if (it.start >= first && it.start + it.len <= second)
                {
                    if (!it.sacked)
                    {
                        if (it.lost)
                        {
                            it.lost = false;
                            e.lost_out -= it.len;
                        }
                        it.sacked = true;
                        e.sacked_out += it.len;
                        newly += it.len;
                        if (!it.delivered)
                        {
                            it.delivered = true;
                            e.delivered += it.len;
                        }
                        if (!e.sack_seen || e.highest_sack <= it.start)
                        {
                            e.sack_seen = true;
                            e.highest_sack = it.start;
                        }
                    }
                }
                else if (it.start + it.len > second)
                {
                    break;
                }
            }
        }
        if (newly > 0)
        {
            UpdateLostCount(e);
        }
        return newly;
    }

    /** TcpTxBuffer::UpdateLostCount: below the DupThresh-th SACKed item from the top, every item is lost. */
    void UpdateLostCount(End& e)
    {
        size_t top = 0;
        while (top < e.sent.size() && e.sent[top].start != e.highest_sack)
        {
            ++top;
        }
        if (top == e.sent.size())
        {
            top = e.sent.size() - 1;
        }
        uint32_t sacked = 0;
        for (size_t i = top; i > 0; --i)
        {
            End::Item& it = e.sent[i];
            sacked += it.sacked ? 1 : 0;
            if (sacked >= DUP_THRESH && !it.sacked && !it.lost)
            {
                it.lost = true;
                e.lost_out += it.len;
            }
        }
        if (sacked >= DUP_THRESH && !e.sent.front().lost)
        {
            e.sent.front().lost = true;
            e.lost_out += e.sent.front().len;
        }
    }

    void Remove(End& e, const End::Item& it, uint32_t bytes)
    {
        if (it.sacked)
        {
            e.sacked_out -= bytes;
        }
        if (it.lost)
        {
            e.lost_out -= bytes;
        }
        if (it.retrans)
        {
            e.retrans_out -= bytes;
        }
        e.sent_bytes -= bytes;
    }

    /** TcpTxBuffer::DiscardUpTo. */
    void DiscardUpTo(End& e, uint64_t ack)
    {
        while (!e.sent.empty() && e.una < ack)
        {
            End::Item& it = e.sent.front();
            uint64_t cut = ack - it.start;
            if (cut >= it.len)
            {
                Remove(e, it, it.len);
                if (!it.delivered)
                {
                    e.delivered += it.len;
                }
                e.una = it.start + it.len;
                e.sent.pop_front();
            }
            else
            {
                Remove(e, it, static_cast<uint32_t>(cut));
                it.start += cut;
                it.len -= static_cast<uint32_t>(cut);
                e.una = ack;
            }
        }
        e.una = std::max(e.una, ack);
        if (!e.sent.empty() && e.sent.front().sacked)
        {
            End::Item& head = e.sent.front();
            head.sacked = false;
            e.sacked_out -= head.len;
            MarkHeadAsLost(e);
        }
        if (e.sack_seen && e.highest_sack <= e.una)
        {
            e.sack_seen = false;
        }
    }

    void MarkHeadAsLost(End& e)
    {
        if (e.sent.empty())
        {
            return;
        }
        End::Item& head = e.sent.front();
        if (head.sacked)
        {
            head.sacked = false;
            e.sacked_out -= head.len;
        }
        if (head.retrans)
        {
            head.retrans = false;
            e.retrans_out -= head.len;
        }
        if (!head.lost)
        {
            head.lost = true;
            e.lost_out += head.len;
        }
    }

    bool IsLost(const End& e, uint64_t seq) const
    {
        if (!e.sack_seen || seq >= e.highest_sack)
        {
            return false;
        }
        for (const End::Item& it : e.sent)
        {
            if (it.start <= seq && seq < it.start + it.len)
            {
                return it.lost;
            }
        }
        return false;
    }

    bool IsRetransmittedDataAcked(const End& e, uint64_t ack) const
    {
        for (const End::Item& it : e.sent)
        {
            if (it.start + it.len == ack && !it.sacked && it.retrans)
            {
                return true;
            }
        }
        return false;
    }

    /** TcpTxBuffer::NextSeg: a lost item (rule 1), new data (2), or in recovery an unSACKed item below the
     *  highest SACK (3). Returns the sequence and the most bytes to send from it. */
    bool NextSeg(const End& e, uint64_t& seq, uint64_t& limit, bool recovery) const
    {
        bool rule3 = false;
        uint64_t seq3 = 0;
        if (e.lost_out > 0 || recovery)
        {
            for (const End::Item& it : e.sent)
            {
                if (!it.retrans && !it.sacked && (!e.sack_seen || it.start < e.highest_sack))
                {
                    if (it.lost)
                    {
                        seq = it.start;
                        limit = it.len;
                        return true;
                    }
                    if (!rule3 && recovery)
                    {
                        rule3 = true;
                        seq3 = it.start;
                    }
                }
            }
        }
        uint64_t sent_end = e.una + e.sent_bytes;
        if (e.out.appended > sent_end)
        {
            if (e.sent_bytes < e.rwnd)
            {
                seq = sent_end;
                limit = std::min<uint64_t>(p.segment, e.rwnd - e.sent_bytes);
                return true;
            }
            return false;
        }
        if (rule3)
        {
            seq = seq3;
            for (const End::Item& it : e.sent)
            {
                if (it.start == seq3)
                {
                    limit = it.len;
                }
            }
            return true;
        }
        return false;
    }

    // ---- sending (TcpSocketBase::SendPendingData, SendDataPacket)

    uint64_t AvailableWindow(const End& e) const
    {
        uint64_t win = std::min<uint64_t>(e.rwnd, e.cwnd);
        uint64_t inflight = e.BytesInFlight();
        return inflight > win ? 0 : win - inflight;
    }

    void SendPendingData(End& e)
    {
        if (!e.established || e.out.appended == e.una)
        {
            return;
        }
        uint64_t avail = AvailableWindow(e);
        while (avail > 0)
        {
            uint64_t next = 0, limit = 0;
            if (!NextSeg(e, next, limit, e.cong == End::Cong::RECOVERY))
            {
                break;
            }
            uint64_t data = e.out.appended - next;
            if (avail < p.segment && data > avail)
            {
                break;
            }
            uint64_t s = std::min<uint64_t>({avail, p.segment, limit});
            e.nxt = next;
            e.nxt += SendDataPacket(e, next, static_cast<uint32_t>(s));
            avail = AvailableWindow(e);
        }
    }

    uint32_t SendDataPacket(End& e, uint64_t seq, uint32_t max_size)
    {
        uint64_t sent_end = e.una + e.sent_bytes;
        uint32_t sz;
        bool is_retrans = seq < sent_end;
        if (is_retrans)
        {
            // One item again (ns-3 would merge short items up to a segment: the baselines send full ones).
            auto it = std::find_if(e.sent.begin(), e.sent.end(), [seq](const End::Item& i) {
                return i.start <= seq && seq < i.start + i.len;
            });
            if (it == e.sent.end())
            {
                throw std::logic_error("lean TCP: retransmission of data not in flight");
            }
            sz = it->len;
            if (!it->retrans)
            {
                it->retrans = true;
                e.retrans_out += it->len;
            }
        }
        else
        {
            sz = static_cast<uint32_t>(std::min<uint64_t>(max_size, e.out.appended - seq));
            e.sent.push_back({seq, sz});
            e.sent_bytes += sz;
        }
        uint8_t flags = ACK;
        if (e.ecn == End::SendEcn::ECE_RCVD && e.ecn_echo_seq > e.ecn_cwr_seq && !is_retrans)
        {
            e.ecn = End::SendEcn::CWR_SENT;
            e.ecn_cwr_seq = seq;
            flags |= CWR;
        }
        if (!e.timer_armed)
        {
            Arm(e);
        }
        Emit(e, flags, seq, sz, 0);
        if (!is_retrans)
        {
            e.history.push_back({seq, sz});
        }
        else
        {
            for (End::RttHistory& h : e.history)
            {
                if (seq >= h.seq && seq < h.seq + h.count)
                {
                    h.count = static_cast<uint32_t>(seq + sz - h.seq);
                    break;
                }
            }
        }
        if (e.cong == End::Cong::RECOVERY || e.cong == End::Cong::CWR)
        {
            e.prr_out += sz;
        }
        e.high = std::max(e.high, seq + sz);
        return sz;
    }

    // ---- congestion control (TcpNewReno, or TcpLinuxReno under TcpDctcp)

    uint32_t GetSsThresh(const End& e, uint64_t in_flight) const
    {
        if (p.dctcp)
        {
            // At least 2 segments, as Linux's dctcp_ssthresh (ns-3's TcpDctcp has no floor). Without it a
            // marked window shrinks below a segment; once nothing is in flight the silly-window check holds the
            // next message back, no ACK or timer is left to wake the end, and the connection stalls for good.
            return std::max<uint32_t>(2 * p.segment, static_cast<uint32_t>((1 - e.alpha / 2.0) * e.cwnd));
        }
        return std::max<uint32_t>(2 * p.segment, static_cast<uint32_t>(in_flight / 2));
    }

    void IncreaseWindow(End& e, uint32_t acked)
    {
        if (p.dctcp)
        {
            if (e.cwnd < e.ssthresh)
            {
                if (acked >= 1)
                {
                    uint32_t before = e.cwnd;
                    e.cwnd = static_cast<uint32_t>(
                        std::min<uint64_t>(uint64_t{before} + uint64_t{acked} * p.segment, e.ssthresh));
                    acked -= (e.cwnd - before) / p.segment;
                }
                return;
            }
            uint32_t w = std::max<uint32_t>(1, e.cwnd / p.segment);
            if (e.cwnd_cnt >= w)
            {
                e.cwnd_cnt = 0;
                e.cwnd += p.segment;
            }
            e.cwnd_cnt += acked;
            if (e.cwnd_cnt >= w)
            {
                uint32_t delta = e.cwnd_cnt / w;
                e.cwnd_cnt -= delta * w;
                e.cwnd += delta * p.segment;
            }
            return;
        }
        if (e.cwnd < e.ssthresh && acked >= 1)
        {
            e.cwnd += p.segment;
            acked -= 1;
        }
        if (e.cwnd >= e.ssthresh && acked > 0)
        {
            double adder = static_cast<double>(p.segment) * p.segment / e.cwnd;
            e.cwnd += static_cast<uint32_t>(std::max(1.0, adder));
        }
    }

    /** TcpDctcp::PktsAcked: the fraction of bytes acknowledged with ECE, once per window of data. */
    void PktsAcked(End& e, uint32_t segments)
    {
        if (!p.dctcp)
        {
            return;
        }
        e.acked_total += uint64_t{segments} * p.segment;
        if (e.ecn == End::SendEcn::ECE_RCVD)
        {
            e.acked_ecn += uint64_t{segments} * p.segment;
        }
        if (!e.alpha_next_set)
        {
            e.alpha_next = e.nxt;
            e.alpha_next_set = true;
        }
        if (e.una >= e.alpha_next)
        {
            double f = e.acked_total > 0 ? static_cast<double>(e.acked_ecn) / e.acked_total : 0.0;
            e.alpha = (1.0 - DCTCP_G) * e.alpha + DCTCP_G * f;
            e.alpha_next = e.nxt;
            e.acked_ecn = e.acked_total = 0;
        }
    }

    // TcpPrrRecovery
    void PrrEnter(End& e, uint32_t delivered)
    {
        e.prr_out = 0;
        e.prr_delivered = 0;
        e.recovery_flight = e.BytesInFlight();
        PrrDo(e, delivered, true);
    }

    void PrrDo(End& e, uint32_t delivered, bool dupack)
    {
        uint64_t in_flight = e.BytesInFlight();
        if (dupack && e.prr_delivered < e.recovery_flight)
        {
            delivered += p.segment;
        }
        if (delivered == 0)
        {
            return;
        }
        e.prr_delivered += delivered;
        int64_t send;
        if (in_flight > e.ssthresh)
        {
            send = static_cast<int64_t>(std::ceil(static_cast<double>(e.prr_delivered) * e.ssthresh /
                                                  static_cast<double>(e.recovery_flight))) -
                   static_cast<int64_t>(e.prr_out);
        }
        else
        {
            int64_t limit = std::max<int64_t>(static_cast<int64_t>(e.prr_delivered - e.prr_out), delivered);
            if (e.retrans_data_acked)
            {
                limit += p.segment;
            }
            send = std::min<int64_t>(limit, static_cast<int64_t>(e.ssthresh) - static_cast<int64_t>(in_flight));
        }
        send = std::max<int64_t>(send, e.prr_out > 0 ? 0 : p.segment);
        e.cwnd = static_cast<uint32_t>(std::max<int64_t>(0, static_cast<int64_t>(in_flight) + send));
    }

    void EnterCwr(End& e, uint32_t delivered)
    {
        e.ssthresh = GetSsThresh(e, e.BytesInFlight());
        e.cong = End::Cong::CWR;
        e.recover = e.high;
        PrrEnter(e, delivered);
    }

    void EnterRecovery(End& e, uint32_t delivered)
    {
        if (!IsLost(e, e.una))
        {
            MarkHeadAsLost(e);
        }
        e.recover = e.high;
        e.recover_active = true;
        e.cong = End::Cong::RECOVERY;
        e.ssthresh = GetSsThresh(e, e.BytesInFlight());
        PrrEnter(e, delivered);
        SendDataPacket(e, e.una, p.segment);
    }

    void DupAck(End& e, uint32_t delivered)
    {
        if (e.cong == End::Cong::LOSS)
        {
            return;
        }
        if (e.cong != End::Cong::RECOVERY)
        {
            ++e.dupacks;
        }
        if (e.cong == End::Cong::OPEN)
        {
            e.cong = End::Cong::DISORDER;
        }
        if (e.cong == End::Cong::RECOVERY)
        {
            PrrDo(e, delivered, true);
        }
        else if (e.cong == End::Cong::DISORDER)
        {
            if (e.dupacks == DUP_THRESH && (e.una >= e.recover || !e.recover_active))
            {
                EnterRecovery(e, delivered);
            }
            else if (IsLost(e, e.una))
            {
                EnterRecovery(e, delivered);
            }
        }
    }

    /** TcpSocketBase::NewAck. */
    void NewAck(End& e, uint64_t ack, bool reset_rto)
    {
        if (reset_rto)
        {
            e.rto = RtoFromEstimate(e);
            Arm(e);
        }
        e.nxt = std::max(e.nxt, ack);
        if (e.out.appended == e.una)
        {
            e.timer_armed = false; // nothing left to retransmit
        }
    }

    /** TcpSocketBase::DoRetransmit. */
    void DoRetransmit(End& e)
    {
        uint64_t seq = 0, limit = 0;
        if (!NextSeg(e, seq, limit, false))
        {
            seq = e.una;
            limit = p.segment;
        }
        e.nxt = seq;
        SendDataPacket(e, seq, static_cast<uint32_t>(limit));
    }

    /** TcpSocketBase::ProcessAck. */
    void ProcessAck(End& e, uint64_t ack, bool scoreboard_updated, uint32_t delivered, uint64_t old_head)
    {
        bool exited_fast_recovery = false;
        uint32_t old_dupacks = e.dupacks;
        bool is_dupack = scoreboard_updated;
        if (is_dupack)
        {
            DupAck(e, delivered);
        }
        if (ack == old_head && ack == e.high)
        {
            return;
        }
        if (ack == old_head)
        {
            PktsAcked(e, 1);
            return;
        }
        if (ack < old_head)
        {
            return;
        }
        uint32_t bytes_acked = delivered;
        uint32_t segs = bytes_acked / p.segment;
        e.acked_not_processed += bytes_acked % p.segment;
        bytes_acked -= bytes_acked % p.segment;
        if (e.acked_not_processed >= p.segment)
        {
            segs += 1;
            bytes_acked += p.segment;
            e.acked_not_processed -= p.segment;
        }
        if (!is_dupack)
        {
            e.dupacks = 0;
        }
        if (ack < e.recover && e.cong == End::Cong::RECOVERY)
        {
            if (segs >= 1)
            {
                PrrDo(e, delivered, false);
            }
            if (!IsRetransmittedDataAcked(e, ack + p.segment))
            {
                DoRetransmit(e);
            }
            PktsAcked(e, 1);
            NewAck(e, ack, e.first_partial_ack);
            e.first_partial_ack = false;
        }
        else if (ack < e.recover && e.cong == End::Cong::LOSS)
        {
            PktsAcked(e, segs);
            IncreaseWindow(e, segs);
            NewAck(e, ack, true);
        }
        else if (e.cong == End::Cong::CWR)
        {
            PktsAcked(e, segs);
            if (segs >= 1)
            {
                PrrDo(e, delivered, false);
            }
            NewAck(e, ack, true);
        }
        else
        {
            if (e.cong == End::Cong::OPEN)
            {
                PktsAcked(e, segs);
            }
            else if (e.cong == End::Cong::DISORDER)
            {
                if (segs >= old_dupacks)
                {
                    PktsAcked(e, segs - old_dupacks);
                }
                if (!is_dupack)
                {
                    e.cong = End::Cong::OPEN;
                }
            }
            else if (e.cong == End::Cong::RECOVERY)
            {
                e.first_partial_ack = true;
                segs = static_cast<uint32_t>((ack - old_head) / p.segment);
                PktsAcked(e, segs);
                e.cong = End::Cong::OPEN;
                exited_fast_recovery = true;
                e.dupacks = 0;
            }
            else if (e.cong == End::Cong::LOSS)
            {
                e.first_partial_ack = true;
                segs = static_cast<uint32_t>((ack - e.recover) / p.segment);
                PktsAcked(e, segs);
                e.cong = End::Cong::OPEN;
            }
            if (ack >= e.recover)
            {
                e.recover_active = false;
            }
            if (exited_fast_recovery)
            {
                NewAck(e, ack, true);
                e.cwnd = e.ssthresh;
            }
            if (e.cong == End::Cong::OPEN)
            {
                IncreaseWindow(e, segs);
                NewAck(e, ack, true);
            }
        }
    }

    /** TcpSocketBase::ReceivedAck. */
    void ReceivedAck(End& e, const Head& h, uint64_t ack)
    {
        uint64_t before = e.delivered;
        uint64_t sacked = UpdateSacks(e, h, ack);
        uint64_t old_head = e.una;
        if (ack < old_head)
        {
            return;
        }
        if (ack > old_head && ack < e.recover && e.cong == End::Cong::RECOVERY)
        {
            uint32_t segs = static_cast<uint32_t>((ack - old_head) / p.segment);
            for (uint32_t i = 0; i < segs; ++i)
            {
                if (IsRetransmittedDataAcked(e, ack - uint64_t{i} * p.segment))
                {
                    e.retrans_data_acked = true;
                }
            }
        }
        DiscardUpTo(e, ack);
        uint32_t delivered = static_cast<uint32_t>(e.delivered - before);
        if (e.cong == End::Cong::CWR && ack > e.recover)
        {
            e.cong = End::Cong::OPEN;
            e.cwnd = e.ssthresh;
        }
        if (ack > old_head && p.dctcp && (h.flags & ECE))
        {
            if (e.ecn_echo_seq < ack)
            {
                e.ecn_echo_seq = ack;
                e.ecn = End::SendEcn::ECE_RCVD;
                if (e.cong != End::Cong::CWR)
                {
                    EnterCwr(e, delivered);
                }
            }
        }
        else if (e.ecn == End::SendEcn::ECE_RCVD && !(h.flags & ECE))
        {
            e.ecn = End::SendEcn::IDLE;
        }
        ProcessAck(e, ack, sacked > 0, delivered, old_head);
        e.retrans_data_acked = false;
    }

    /** TcpSocketBase::ReTxTimeout. */
    void RetxTimeout(End& e)
    {
        if (e.out.appended == e.una)
        {
            return;
        }
        uint64_t in_flight = e.BytesInFlight();
        e.dupacks = 0;
        // SetSentListLost(false): every item neither SACKed nor lost is lost; nothing counts as retransmitted.
        e.retrans_out = 0;
        e.lost_out = 0;
        for (End::Item& it : e.sent)
        {
            if (!it.sacked)
            {
                it.lost = true;
                e.lost_out += it.len;
            }
            it.retrans = false;
        }
        e.recover = e.high;
        e.recover_active = true;
        e.rto = std::min(e.rto + e.rto, Seconds(60));
        e.history.clear();
        // ns-3 keeps ssthresh when the head was already retransmitted in CA_LOSS, but asks after clearing
        // the flags above, so it always sets it.
        e.ssthresh = GetSsThresh(e, in_flight);
        e.cong = End::Cong::LOSS;
        e.cwnd = p.segment;
        SendPendingData(e);
    }

    // ---- receiving (TcpSocketBase::ReceivedData, TcpRxBuffer)

    /** TcpRxBuffer::Add and its SACK list; false if the segment brought nothing new. */
    bool RxAdd(End& e, uint64_t start, uint64_t end)
    {
        if (end <= e.rcv_nxt)
        {
            return false;
        }
        start = std::max(start, e.rcv_nxt);
        if (start > e.rcv_nxt)
        {
            auto it = e.ooo.upper_bound(start);
            if (it != e.ooo.begin() && std::prev(it)->second >= end)
            {
                return false; // held already
            }
            uint64_t s = start, t = end;
            if (it != e.ooo.begin() && std::prev(it)->second >= s)
            {
                --it;
                s = it->first;
                t = std::max(t, it->second);
                it = e.ooo.erase(it);
            }
            while (it != e.ooo.end() && it->first <= t)
            {
                t = std::max(t, it->second);
                it = e.ooo.erase(it);
            }
            e.ooo[s] = t;
            UpdateSackList(e, start, end);
            return true;
        }
        e.rcv_nxt = end;
        while (!e.ooo.empty() && e.ooo.begin()->first <= e.rcv_nxt)
        {
            e.rcv_nxt = std::max(e.rcv_nxt, e.ooo.begin()->second);
            e.ooo.erase(e.ooo.begin());
        }
        std::erase_if(e.sacks, [&e](const auto& b) { return b.second <= e.rcv_nxt; });
        return true;
    }

    void UpdateSackList(End& e, uint64_t head, uint64_t tail)
    {
        e.sacks.emplace_front(head, tail);
        for (size_t i = 1; i < e.sacks.size();)
        {
            auto begin = e.sacks.front();
            auto cur = e.sacks[i];
            std::pair<uint64_t, uint64_t> merged;
            bool updated = false;
            if (begin.first == cur.second)
            {
                merged = {cur.first, begin.second};
                updated = true;
            }
            else if (begin.second == cur.first)
            {
                merged = {begin.first, cur.second};
                updated = true;
            }
            if (updated)
            {
                e.sacks.erase(e.sacks.begin() + static_cast<std::ptrdiff_t>(i));
                e.sacks.front() = merged;
                i = 1;
                continue;
            }
            ++i;
        }
        if (e.sacks.size() > SACK_LIST_KEPT)
        {
            e.sacks.pop_back();
        }
    }

    void ReceivedData(End& e, uint64_t seq, uint32_t len)
    {
        uint64_t expected = e.rcv_nxt;
        if (RxAdd(e, seq, seq + len) && e.rcv_nxt > expected)
        {
            e.in->Read(e.rcv_nxt - expected, completed);
        }
        SendAck(e); // DelAckCount 1: every segment is acknowledged at once, in order or not
    }

    // ---- a frame arrives

    void Receive(const Frame& f)
    {
        Head h;
        std::memcpy(&h, f.head + 4, sizeof(h));
        End& e = *ends.at(h.end);
        uint64_t seq = Unwrap(h.seq, e.rcv_nxt);
        // ECN at the receiver (TcpSocketBase::ForwardUp, TcpDctcp's CE state): ACKs echo the last segment's CE.
        if (p.dctcp)
        {
            if (f.ip.GetEcn() == Ipv4Header::ECN_CE && e.ecn_ce_seq < seq)
            {
                e.ecn_ce_seq = seq;
                e.ce = true;
            }
            else if (f.ip.GetEcn() != Ipv4Header::ECN_NotECT)
            {
                e.ce = false;
            }
        }
        // Timestamps (ProcessOptionTimestamp): echo the newest in-order segment's.
        if (h.tsval >= e.ts_recent)
        {
            e.ts_recent = h.tsval;
            if (seq == e.rcv_nxt && seq <= e.high_tx_ack)
            {
                e.ts_echo = h.tsval;
            }
        }
        if (h.flags & SYN)
        {
            if (h.flags & ACK)
            {
                // SYN-ACK at the end that connected: established; its ACK goes back. (The SYNs take no
                // sequence number here: each stream's data starts at 0.)
                EstimateRtt(e, 0, h.tsecr);
                SendAck(e);
                Established(e);
            }
            else
            {
                // SYN at the end that accepts: answer SYN-ACK (counted in its RTT history, as ns-3 does).
                Emit(e, SYN | ACK, 0, 0, 0);
                e.history.push_back({0, 0});
            }
            return;
        }
        // Past the handshake every segment carries the scaled window: the receive buffer (the application reads
        // at once; what it holds out of order is not subtracted).
        e.rwnd = ScaledWindow();
        if (!e.established)
        {
            // The handshake's last ACK (or data carrying it) at the end that accepted.
            EstimateRtt(e, 0, h.tsecr);
            Established(e);
        }
        else
        {
            EstimateRtt(e, Unwrap(h.ack, e.una), h.tsecr);
        }
        uint64_t ack = Unwrap(h.ack, e.una);
        if (ack <= e.high)
        {
            ReceivedAck(e, h, ack);
        }
        if (h.len > 0)
        {
            ReceivedData(e, seq, h.len);
        }
        SendPendingData(e);
    }
};

LeanTcp::LeanTcp(const LeanTcpParams& params, std::vector<uint32_t> addresses, Output output, Completed completed)
    : m_nextPort(addresses.size(), EPHEMERAL_FIRST),
      m(std::make_unique<Machine>(params, std::move(addresses), std::move(output), std::move(completed)))
{
}

LeanTcp::~LeanTcp() = default;

uint32_t
LeanTcp::Connections() const
{
    return static_cast<uint32_t>(m->ends.size() / 2);
}

LeanTcp::End&
LeanTcp::NewConnection(uint32_t src, uint32_t dst, uint32_t tag)
{
    if (tag > UINT16_MAX - TCP_MESSAGE_PORT_BASE)
    {
        throw std::invalid_argument("too many workload tags for one TCP port each");
    }
    uint32_t first = static_cast<uint32_t>(m->ends.size());
    for (uint32_t s = 0; s < 2; ++s)
    {
        auto e = std::make_unique<End>();
        e->index = first + s;
        e->peer = first + 1 - s;
        e->host = s == 0 ? src : dst;
        e->peer_host = s == 0 ? dst : src;
        e->rto = Seconds(3); // ns-3's ConnTimeout until the first RTT sample
        m->ends.push_back(std::move(e));
    }
    End& client = *m->ends[first];
    End& server = *m->ends[first + 1];
    uint16_t& port = m_nextPort[src];
    port = port == UINT16_MAX ? EPHEMERAL_FIRST : static_cast<uint16_t>(port + 1);
    client.port = server.peer_port = port;
    client.peer_port = server.port = static_cast<uint16_t>(TCP_MESSAGE_PORT_BASE + tag);
    client.in = &server.out;
    server.in = &client.out;
    m->Connect(client);
    return client;
}

void
LeanTcp::Open(uint32_t src, uint32_t dst, uint32_t tag)
{
    std::tuple<uint32_t, uint32_t, uint32_t> key{tag, std::min(src, dst), std::max(src, dst)};
    if (m_connection.find(key) == m_connection.end())
    {
        m_connection[key] = NewConnection(src, dst, tag).index;
    }
}

void
LeanTcp::Send(uint32_t src, uint32_t dst, uint32_t tag, uint64_t bytes, uint32_t msg)
{
    Open(src, dst, tag);
    uint32_t first = m_connection.at({tag, std::min(src, dst), std::max(src, dst)});
    End& e = m->ends[first]->host == src ? *m->ends[first] : *m->ends[first + 1];
    e.out.Append(bytes, msg);
    if (bytes == 0)
    {
        e.out.Read(0, m->completed); // nothing to carry: complete once every message before it is
        return;
    }
    m->SendPendingData(e);
}

void
LeanTcp::Receive(const Frame& frame)
{
    m->Receive(frame);
}

} // namespace dlcpsim
