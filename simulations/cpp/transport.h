// DLCP's bounded-loss transport as an ns-3 application (one per host), after the
// host stack (docs/transport.md): a paced first pass (front layers first), a
// PROBE after it, BITMAP/STOP answers from the receiver, retransmissions of
// what the bound does not allow at the top class with RETX, probes again on a
// doubling timeout, and loss-based AIMD on each verdict.
// Retransmissions are paced like first passes (at the host's current rate, ahead
// of them), not sent as a burst: a burst of top-class packets from many senders
// fills a switch buffer with packets nothing can push out. The rate follows the
// core's rule (rate_control.h, dlcp/rate_control.py) on each message's first-pass
// verdict, as the host stack does.
// Completion follows the core's rule (message_state.h).
#pragma once

#include "active_shares.h"
#include "message_state.h"
#include "types.h"
#include "wire.h"

#include "ns3/application.h"
#include "ns3/event-id.h"
#include "ns3/inet-socket-address.h"
#include "ns3/ipv4-address.h"
#include "ns3/nstime.h"
#include "ns3/socket.h"

#include <array>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace dlcpsim
{

/** One message to send: its identity, shape and marking. */
struct SendSpec
{
    uint32_t msg_id = 0;
    uint32_t round = 0;
    uint8_t kind = 0;
    uint16_t layer = 0;
    uint8_t priority = 0;
    uint8_t control_priority = DLCP_CONTROL_PRIORITY;
    MessageShape shape;
    std::array<double, DLCP_NUM_DROP_CLASSES> drop_fractions{1.0, 0.0, 0.0, 0.0};
};

class DlcpHost : public ns3::Application
{
  public:
    static ns3::TypeId GetTypeId();
    DlcpHost();
    ~DlcpHost() override;

    void Configure(uint32_t rank,
                   const TransportParams& params,
                   const std::vector<ns3::Ipv4Address>* addresses,
                   std::vector<FlowRecord>* records,
                   HostCounters* counters,
                   uint64_t seed);

    /** Send a message to host `dst` now; `on_acked` runs when the sender hears STOP. */
    void Send(uint32_t record, uint32_t dst, const SendSpec& spec, std::function<void()> on_acked);
    /** Expect a message from host `src`; `on_complete` runs when it completes here. */
    void Expect(uint32_t record, uint32_t src, uint32_t msg_id, const MessageShape& shape,
                std::function<void()> on_complete);

    double Rate() const
    {
        return m_rate;
    }

    /** This host's share of HostCounters::pacing_excess_s. */
    double PacingExcess() const
    {
        return m_paceExcess;
    }

    /** How a packet leaves this host: (UDP payload from the DLCP header on, destination host).
     *  Unset: through a UDP socket and ns-3's IP stack. Set (DLCP's port model, port.h): straight
     *  to the host's port; incoming packets then arrive by Deliver, not through a socket. */
    using Output = std::function<void(ns3::Ptr<ns3::Packet>, uint32_t)>;
    void SetOutput(Output out)
    {
        m_output = std::move(out);
    }

    /** Pace each receiver at its pair's share over the senders active now (`shares`, shared by every host),
     *  messages to different receivers interleaved, the host's own rate (its rule) capping the sum. */
    void SetActiveShares(ActiveShares* shares)
    {
        m_shares = shares;
    }

    /** A DLCP packet for this host: `h` its header (`n` bytes of it present), `p` the packet with
     *  the header at byte `header_at`. */
    void Deliver(const uint8_t* h, uint32_t n, ns3::Ptr<ns3::Packet> p, uint32_t header_at);

  private:
    struct TxMsg
    {
        uint32_t record = 0;
        uint32_t dst = 0;
        SendSpec spec;
        uint8_t hdr[DLCP_HEADER_BYTES] = {};
        std::vector<uint8_t> drop_class;
        uint32_t next_seq = 0;
        bool passed = false;
        bool stopped = false;
        bool fed_back = false;
        double sent_at = 0; // the host's rate when the message was handed over (its verdict's base)
        uint32_t probe_id = 0;
        double rto = 0;
        ns3::EventId timer;
        std::vector<std::pair<uint32_t, std::vector<uint8_t>>> pending; // BITMAP chunks
        std::deque<uint32_t> retx; // packets to retransmit, paced by TxLoop
        bool retx_queued = false;  // in m_retxFifo
        bool active = false;       // counted in m_shares (packets left to send)
        std::function<void()> on_acked;
    };

    struct RxMsg
    {
        uint32_t record = 0;
        uint32_t src = 0;
        MessageState state;
        std::function<void()> on_complete;
    };

    void StartApplication() override;
    void StopApplication() override;
    void TxLoop();
    /** TxLoop with m_shares: the first message (retransmissions, then by priority) whose receiver's pacer allows. */
    void TxLoopActive();
    bool DestReady(uint32_t dst, ns3::Time now, ns3::Time& wake) const;
    void SetActive(TxMsg& m, bool active);
    void Kick();
    void SendData(TxMsg& m, uint32_t seq, bool retx, uint64_t remaining);
    void SendControl(const uint8_t* tmpl, uint8_t type, uint32_t dst, uint32_t seq, uint32_t offset,
                     uint8_t flags, const uint8_t* payload, uint32_t len);
    void Probe(TxMsg& m);
    void OnTimer(uint64_t key);
    void OnReceive(ns3::Ptr<ns3::Socket> socket);
    void Emit(ns3::Ptr<ns3::Packet> p, uint32_t dst);
    void OnData(const uint8_t* h, bool trimmed);
    void OnProbe(const uint8_t* h);
    void OnReply(const uint8_t* h, ns3::Ptr<ns3::Packet> p);
    void Complete(RxMsg& r, uint32_t probe_id);
    void SendBitmap(RxMsg& r, uint8_t type, uint32_t probe_id);
    void Feedback(double loss, double sent_at);
    /** pFabric: the class of a packet of a message with `remaining` bytes left to send. */
    uint8_t SrptClass(uint64_t remaining) const;
    void Charge(uint32_t wire_bytes, uint32_t dst);

    static uint64_t Key(uint32_t rank, uint32_t msg_id)
    {
        return (static_cast<uint64_t>(rank) << 32) | msg_id;
    }

    uint32_t m_rank = 0;
    TransportParams m_params;
    const std::vector<ns3::Ipv4Address>* m_addresses = nullptr;
    std::vector<FlowRecord>* m_records = nullptr;
    HostCounters* m_counters = nullptr;
    ns3::Ptr<ns3::Socket> m_socket;
    Output m_output;
    std::mt19937_64 m_rng;
    std::mt19937_64 m_phaseRng;

    std::unordered_map<uint64_t, std::unique_ptr<TxMsg>> m_tx;   // by (own rank, msg_id)
    std::array<std::deque<uint64_t>, DLCP_NUM_PRIORITY_CLASSES> m_firstPass; // FIFO per priority
    std::deque<uint64_t> m_retxFifo; // messages with retransmissions to send, served before first passes
    std::unordered_map<uint64_t, std::unique_ptr<RxMsg>> m_rx;   // by (src rank, msg_id)

    double m_rate = 0;
    double m_paceExcess = 0;
    ActiveShares* m_shares = nullptr;
    std::unordered_map<uint32_t, ns3::Time> m_destNext; // with m_shares: when each receiver's pacer allows
    ns3::Time m_nextTx;
    bool m_txScheduled = false;
    ns3::Time m_txAt;       // when the scheduled TxLoop runs
    ns3::EventId m_txEvent; // it (with m_shares a message to a ready receiver may bring it forward)
};

} // namespace dlcpsim
