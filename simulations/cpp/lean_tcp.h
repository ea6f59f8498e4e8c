// A lean TCP for the TCP baselines on DLCP's port model: ns-3's TcpSocketBase with its defaults and
// the settings the baselines give it (build.cc, ConfigureDefaults: NewReno or DCTCP, SACK, timestamps,
// PRR recovery, an ACK per segment, ns-3's RTO rules), without an IP stack,
// sockets, ns-3 packets or TCP headers: a segment is a Frame whose head carries the fields a
// TCP header would (lean_tcp.cc), handed to the host's port directly and taken from it directly.
// The same persistent connections and messages as TcpChannels (tcp_channels.h): one connection
// per pair of hosts and workload tag, a message complete when its receiver has read its last byte.
// What it leaves out of ns-3's TCP: docs/simulations.md, "Baselines".
#pragma once

#include "port.h"
#include "tcp_channels.h"

#include "ns3/nstime.h"

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

namespace dlcpsim
{

/** The settings ns-3's TcpSocketBase takes from the scenario (simulation_impl.h's tcp_*). */
struct LeanTcpParams
{
    bool dctcp = true;           // TcpDctcp (on TcpLinuxReno, ECN on every packet) or TcpNewReno (no ECN)
    uint32_t segment = 1448;     // SegmentSize: payload bytes per segment
    double min_rto_s = 1e-3;     // MinRto
    uint32_t buffer = 4 << 20;   // SndBufSize and RcvBufSize: the most bytes in flight
    uint32_t initial_cwnd = TCP_INITIAL_CWND; // InitialCwnd, segments
};

class LeanTcp : public TcpMessages
{
  public:
    /** Hands a frame from host `host` to its port (the host's routing picks which). */
    using Output = std::function<void(uint32_t host, Frame&& frame)>;

    LeanTcp(const LeanTcpParams& params, std::vector<uint32_t> addresses, Output output, Completed completed);
    ~LeanTcp() override;

    void Open(uint32_t src, uint32_t dst, uint32_t tag) override;
    void Send(uint32_t src, uint32_t dst, uint32_t tag, uint64_t bytes, uint32_t msg) override;
    uint32_t Connections() const override;

    /** A TCP frame arrived at its destination host's port. */
    void Receive(const Frame& frame);

    struct End;

  private:
    struct Machine;

    End& NewConnection(uint32_t src, uint32_t dst, uint32_t tag);

    std::map<std::tuple<uint32_t, uint32_t, uint32_t>, uint32_t> m_connection; // (tag, lower, higher) -> first end
    std::vector<uint16_t> m_nextPort; // per host: its last ephemeral port, as ns-3 allocates them
    std::unique_ptr<Machine> m;
};

} // namespace dlcpsim
