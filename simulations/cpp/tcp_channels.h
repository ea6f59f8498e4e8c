// TCP messages over persistent connections, as gloo and NCCL keep theirs: one connection per
// pair of hosts and workload tag, opened when the run is set up (or by the first message either
// way) and used, in both directions, for every message of that tag between the two hosts. A message is a run of
// bytes on the stream: the sender appends its bytes behind the messages before it, and the
// receiver completes it when it has read up to its last byte (so a message waits behind the
// ones queued before it on its connection, as on a real one).
#pragma once

#include "ns3/ipv4-address.h"
#include "ns3/node.h"
#include "ns3/socket.h"

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace dlcpsim
{

/** The first TCP port of the message listeners; a workload tag's listeners use this plus the tag. */
static constexpr uint16_t TCP_MESSAGE_PORT_BASE = 10000;

// The TCP settings every run gives ns-3's sockets beside the scenario's (build.cc's ConfigureDefaults),
// and the lean TCP follows: the initial window (segments), an ACK for every segment, and the clock
// granularity in the RTO.
static constexpr uint32_t TCP_INITIAL_CWND = 10;
static constexpr uint32_t TCP_DELACK_COUNT = 1;
static constexpr int64_t TCP_CLOCK_GRANULARITY_NS = 1000;

/** TCP messages over persistent connections: on ns-3's sockets (TcpChannels) or on the lean TCP (lean_tcp.h). */
class TcpMessages
{
  public:
    /** Called with a message's id when its receiver has read its last byte. */
    using Completed = std::function<void(uint32_t msg)>;

    virtual ~TcpMessages() = default;

    /** Open the connection of hosts `src` and `dst` for `tag` now (`src` connects), if it is not open yet: a job's
     *  set-up, as gloo's and NCCL's rendezvous connect every pair before the first message. */
    virtual void Open(uint32_t src, uint32_t dst, uint32_t tag) = 0;

    /** Append message `msg` (`bytes` long) to the stream from host `src` to `dst` of tag `tag`'s connection
     *  (opened now if it is not open). */
    virtual void Send(uint32_t src, uint32_t dst, uint32_t tag, uint64_t bytes, uint32_t msg) = 0;

    /** Connections opened so far (one per pair of hosts and tag that exchanged a message). */
    virtual uint32_t Connections() const = 0;
};

/** One direction of a connection's stream: the messages appended to it, and how much of it the receiver read. */
struct MessageStream
{
    uint64_t appended = 0;
    uint64_t received = 0;
    std::deque<std::pair<uint64_t, uint32_t>> ends; // (offset after the message's last byte, message)

    void Append(uint64_t bytes, uint32_t msg)
    {
        appended += bytes;
        ends.emplace_back(appended, msg);
    }

    /** The receiver read `bytes` more: every message whose last byte it has now read is complete. */
    void Read(uint64_t bytes, const TcpMessages::Completed& completed)
    {
        received += bytes;
        while (!ends.empty() && ends.front().first <= received)
        {
            uint32_t msg = ends.front().second;
            ends.pop_front();
            completed(msg);
        }
    }
};

/** TCP messages on ns-3's TCP sockets, over the hosts' IP stacks. */
class TcpChannels : public TcpMessages
{
  public:
    /** `hosts[h]`: host h's node; `addresses[h]`: its IPv4 address. */
    TcpChannels(std::vector<ns3::Ptr<ns3::Node>> hosts, std::vector<ns3::Ipv4Address> addresses, Completed completed);
    ~TcpChannels() override;

    void Open(uint32_t src, uint32_t dst, uint32_t tag) override;
    void Send(uint32_t src, uint32_t dst, uint32_t tag, uint64_t bytes, uint32_t msg) override;

    uint32_t Connections() const override
    {
        return static_cast<uint32_t>(m_channels.size());
    }

  private:
    /** One direction of a connection: its messages, and bytes still to hand to the socket. */
    struct Stream
    {
        MessageStream messages;
        uint64_t unsent = 0;
    };

    struct Channel;

    /** One end of a connection: its socket's callbacks. */
    struct End
    {
        TcpChannels* owner = nullptr;
        Channel* channel = nullptr;
        uint32_t side = 0; // 0: the end that connected, 1: the end that accepted
        ns3::Ptr<ns3::Socket> socket;

        void Attach(ns3::Ptr<ns3::Socket> s);
        void OnSendSpace(ns3::Ptr<ns3::Socket> s, uint32_t available);
        void OnReceive(ns3::Ptr<ns3::Socket> s);
    };

    struct Channel
    {
        std::array<uint32_t, 2> host{};
        std::array<End, 2> end;
        std::array<Stream, 2> out; // out[s]: from host[s] to host[1 - s]
    };

    /** A host's listening socket for one tag. */
    struct Listener
    {
        TcpChannels* owner = nullptr;
        uint32_t host = 0;
        uint32_t tag = 0;
        ns3::Ptr<ns3::Socket> socket;

        void OnAccept(ns3::Ptr<ns3::Socket> s, const ns3::Address& from);
    };

    using Key = std::tuple<uint32_t, uint32_t, uint32_t>; // tag, lower host, higher host

    void Listen(uint32_t host, uint32_t tag);
    Channel& ChannelOf(uint32_t src, uint32_t dst, uint32_t tag);
    void Pump(Channel& c, uint32_t side);
    void Deliver(Channel& c, uint32_t side, uint64_t bytes);

    std::vector<ns3::Ptr<ns3::Node>> m_hosts;
    std::vector<ns3::Ipv4Address> m_addresses;
    std::unordered_map<uint32_t, uint32_t> m_hostOf; // address -> host
    Completed m_completed;
    std::map<Key, std::unique_ptr<Channel>> m_channels;
    std::map<std::pair<uint32_t, uint32_t>, std::unique_ptr<Listener>> m_listeners; // (host, tag)
};

} // namespace dlcpsim
