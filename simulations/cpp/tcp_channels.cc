#include "tcp_channels.h"

#include "ns3/inet-socket-address.h"
#include "ns3/packet.h"
#include "ns3/tcp-socket-factory.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace dlcpsim
{

using namespace ns3;

TcpChannels::TcpChannels(std::vector<Ptr<Node>> hosts, std::vector<Ipv4Address> addresses, Completed completed)
    : m_hosts(std::move(hosts)),
      m_addresses(std::move(addresses)),
      m_completed(std::move(completed))
{
    for (uint32_t h = 0; h < m_addresses.size(); ++h)
    {
        m_hostOf[m_addresses[h].Get()] = h;
    }
}

TcpChannels::~TcpChannels() = default;

void
TcpChannels::Listen(uint32_t host, uint32_t tag)
{
    auto& slot = m_listeners[{host, tag}];
    if (slot)
    {
        return;
    }
    if (tag > UINT16_MAX - TCP_MESSAGE_PORT_BASE)
    {
        throw std::invalid_argument("too many workload tags for one TCP port each");
    }
    slot = std::make_unique<Listener>();
    slot->owner = this;
    slot->host = host;
    slot->tag = tag;
    slot->socket = Socket::CreateSocket(m_hosts[host], TcpSocketFactory::GetTypeId());
    slot->socket->Bind(InetSocketAddress(Ipv4Address::GetAny(), static_cast<uint16_t>(TCP_MESSAGE_PORT_BASE + tag)));
    slot->socket->Listen();
    slot->socket->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                    MakeCallback(&Listener::OnAccept, slot.get()));
}

void
TcpChannels::Open(uint32_t src, uint32_t dst, uint32_t tag)
{
    ChannelOf(src, dst, tag);
}

TcpChannels::Channel&
TcpChannels::ChannelOf(uint32_t src, uint32_t dst, uint32_t tag)
{
    Key key{tag, std::min(src, dst), std::max(src, dst)};
    std::unique_ptr<Channel>& c = m_channels[key];
    if (!c)
    {
        // src connects to dst's listener for this tag (listening from now on, before its SYN can arrive).
        c = std::make_unique<Channel>();
        c->host = {src, dst};
        for (uint32_t s = 0; s < 2; ++s)
        {
            c->end[s].owner = this;
            c->end[s].channel = c.get();
            c->end[s].side = s;
        }
        Listen(dst, tag);
        Ptr<Socket> sock = Socket::CreateSocket(m_hosts[src], TcpSocketFactory::GetTypeId());
        sock->Bind();
        sock->Connect(InetSocketAddress(m_addresses[dst], static_cast<uint16_t>(TCP_MESSAGE_PORT_BASE + tag)));
        c->end[0].Attach(sock);
    }
    return *c;
}

void
TcpChannels::Send(uint32_t src, uint32_t dst, uint32_t tag, uint64_t bytes, uint32_t msg)
{
    Channel* c = &ChannelOf(src, dst, tag);
    uint32_t side = c->host[0] == src ? 0 : 1;
    Stream& out = c->out[side];
    out.messages.Append(bytes, msg);
    out.unsent += bytes;
    if (bytes == 0)
    {
        Deliver(*c, 1 - side, 0); // nothing to carry: complete once every message before it is
    }
    Pump(*c, side);
}

void
TcpChannels::Pump(Channel& c, uint32_t side)
{
    // Hand the socket what its send buffer takes (in SYN_SENT it buffers, and sends once connected);
    // the rest waits for OnSendSpace.
    Stream& out = c.out[side];
    Ptr<Socket> sock = c.end[side].socket;
    while (sock && out.unsent > 0)
    {
        uint64_t room = sock->GetTxAvailable();
        if (room == 0)
        {
            return;
        }
        uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(out.unsent, room));
        if (sock->Send(Create<Packet>(n)) < 0)
        {
            return;
        }
        out.unsent -= n;
    }
}

void
TcpChannels::Deliver(Channel& c, uint32_t side, uint64_t bytes)
{
    // `side` read `bytes`: they belong to the peer's outgoing stream.
    c.out[1 - side].messages.Read(bytes, m_completed);
}

void
TcpChannels::End::Attach(Ptr<Socket> s)
{
    socket = s;
    s->SetSendCallback(MakeCallback(&End::OnSendSpace, this));
    s->SetRecvCallback(MakeCallback(&End::OnReceive, this));
}

void
TcpChannels::End::OnSendSpace(Ptr<Socket>, uint32_t)
{
    owner->Pump(*channel, side);
}

void
TcpChannels::End::OnReceive(Ptr<Socket> s)
{
    uint64_t got = 0;
    while (Ptr<Packet> p = s->Recv())
    {
        got += p->GetSize();
    }
    if (got > 0)
    {
        owner->Deliver(*channel, side, got);
    }
}

void
TcpChannels::Listener::OnAccept(Ptr<Socket> s, const Address& from)
{
    uint32_t peer_address = InetSocketAddress::ConvertFrom(from).GetIpv4().Get();
    auto peer = owner->m_hostOf.find(peer_address);
    if (peer == owner->m_hostOf.end())
    {
        throw std::logic_error("a TCP connection from an address that is no host's");
    }
    Key key{tag, std::min(peer->second, host), std::max(peer->second, host)};
    auto it = owner->m_channels.find(key);
    if (it == owner->m_channels.end() || it->second->host[1] != host || it->second->end[1].socket)
    {
        throw std::logic_error("a TCP connection no message opened (host " + std::to_string(peer->second) + " to " +
                               std::to_string(host) + ")");
    }
    Channel& c = *it->second;
    c.end[1].Attach(s);
    owner->Pump(c, 1); // what this end's host queued for the peer while the connection opened
}

} // namespace dlcpsim
