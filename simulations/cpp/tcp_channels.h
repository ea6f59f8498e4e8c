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

class TcpChannels
{
  public:
    /** Called with a message's id when its receiver has read its last byte. */
    using Completed = std::function<void(uint32_t msg)>;

    /** `hosts[h]`: host h's node; `addresses[h]`: its IPv4 address. */
    TcpChannels(std::vector<ns3::Ptr<ns3::Node>> hosts, std::vector<ns3::Ipv4Address> addresses, Completed completed);
    ~TcpChannels();

    /** Open the connection of hosts `src` and `dst` for `tag` now (`src` connects), if it is not open yet: a job's
     *  set-up, as gloo's and NCCL's rendezvous connect every pair before the first message. */
    void Open(uint32_t src, uint32_t dst, uint32_t tag);

    /** Append message `msg` (`bytes` long) to the stream from host `src` to `dst` of tag `tag`'s connection
     *  (opened now if it is not open). */
    void Send(uint32_t src, uint32_t dst, uint32_t tag, uint64_t bytes, uint32_t msg);

    /** Connections opened so far (one per pair of hosts and tag that exchanged a message). */
    uint32_t Connections() const
    {
        return static_cast<uint32_t>(m_channels.size());
    }

  private:
    /** One direction of a connection: bytes handed to it, still to hand to the socket, and read. */
    struct Stream
    {
        uint64_t appended = 0;
        uint64_t unsent = 0;
        uint64_t received = 0;
        std::deque<std::pair<uint64_t, uint32_t>> ends; // (offset after the message's last byte, message)
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
