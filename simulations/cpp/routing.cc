#include "routing.h"

#include "dlcp_constants.h"
#include "wire.h"

#include "ns3/log.h"
#include "ns3/net-device.h"
#include "ns3/packet.h"

namespace dlcpsim
{

using namespace ns3;

NS_LOG_COMPONENT_DEFINE("DlcpRouting");
NS_OBJECT_ENSURE_REGISTERED(DlcpRouting);

static constexpr uint8_t IPPROTO_TCP = 6;
static constexpr uint8_t IPPROTO_UDP = 17;

static inline uint64_t
Mix(uint64_t x)
{
    // splitmix64 finaliser: a cheap, well-spread hash (the switch uses CRC; any good hash will do).
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

TypeId
DlcpRouting::GetTypeId()
{
    static TypeId tid = TypeId("dlcpsim::DlcpRouting")
                            .SetParent<Ipv4RoutingProtocol>()
                            .SetGroupName("Internet")
                            .AddConstructor<DlcpRouting>();
    return tid;
}

DlcpRouting::DlcpRouting() = default;
DlcpRouting::~DlcpRouting() = default;

void
DlcpRouting::SetGroup(uint32_t gid, const std::vector<uint32_t>& interfaces)
{
    if (m_groups.size() <= gid)
    {
        m_groups.resize(gid + 1);
    }
    m_groups[gid] = interfaces;
}

void
DlcpRouting::SetHostGroup(uint32_t host, uint32_t gid)
{
    if (m_hostGroup.size() <= host)
    {
        m_hostGroup.resize(host + 1, -1);
    }
    m_hostGroup[host] = static_cast<int32_t>(gid);
}

int32_t
DlcpRouting::GroupFor(Ipv4Address dst) const
{
    if (m_book != nullptr)
    {
        auto it = m_book->host_of_address.find(dst.Get());
        if (it != m_book->host_of_address.end() && it->second < m_hostGroup.size() && m_hostGroup[it->second] >= 0)
        {
            return m_hostGroup[it->second];
        }
    }
    return m_default;
}

Ptr<Ipv4Route>
DlcpRouting::RouteVia(uint32_t interface)
{
    if (m_routeVia.size() <= interface)
    {
        m_routeVia.resize(interface + 1);
    }
    if (!m_routeVia[interface])
    {
        Ptr<Ipv4Route> r = Create<Ipv4Route>();
        Ptr<NetDevice> dev = m_ipv4->GetNetDevice(interface);
        Ipv4InterfaceAddress own = m_ipv4->GetAddress(interface, 0);
        // Point-to-point /30: the peer is the other usable address of the subnet.
        uint32_t a = own.GetLocal().Get();
        uint32_t peer = (a & 3) == 1 ? a + 1 : a - 1;
        r->SetSource(own.GetLocal());
        r->SetGateway(Ipv4Address(peer));
        r->SetOutputDevice(dev);
        r->SetDestination(Ipv4Address(peer));
        m_routeVia[interface] = r;
    }
    return m_routeVia[interface];
}

Ptr<Ipv4Route>
DlcpRouting::Pick(int32_t gid, const Ipv4Header& header, Ptr<const Packet> p)
{
    m_lookups++;
    if (gid < 0 || static_cast<size_t>(gid) >= m_groups.size() || m_groups[gid].empty())
    {
        return nullptr;
    }
    const std::vector<uint32_t>& g = m_groups[gid];
    if (g.size() == 1)
    {
        return RouteVia(g[0]);
    }
    uint64_t key = (static_cast<uint64_t>(header.GetSource().Get()) << 32) | header.GetDestination().Get();
    uint64_t entropy = header.GetProtocol();
    if (p && (header.GetProtocol() == IPPROTO_UDP || header.GetProtocol() == IPPROTO_TCP))
    {
        uint8_t l4[dlcp::MIN_DLCP_UDP_LENGTH];
        uint32_t n = p->CopyData(l4, sizeof(l4));
        if (n >= 4)
        {
            entropy = (entropy << 32) | GetField(l4, 0, 4); // source and destination ports
        }
        if (header.GetProtocol() == IPPROTO_UDP && n >= dlcp::MIN_DLCP_UDP_LENGTH)
        {
            uint16_t dport = static_cast<uint16_t>(GetField(l4, 2, 2));
            const uint8_t* h = l4 + dlcp::UDP_HEADER_SIZE;
            bool dlcp_port = dport == dlcp::UDP_PORT || (m_book && m_book->dlcp_ports.count(dport) > 0);
            if (dlcp_port && (m_book == nullptr || m_book->spray) && VersionOf(h) == dlcp::VERSION && PacketTypeOf(h) == dlcp::TYPE_DATA)
            {
                entropy ^= static_cast<uint64_t>(GetField(h, dlcp::OFF_SEQ, dlcp::SIZE_SEQ)) << 8;
            }
        }
    }
    uint64_t hsh = Mix(key ^ Mix(entropy));
    return RouteVia(g[hsh % g.size()]);
}

Ptr<Ipv4Route>
DlcpRouting::RouteOutput(Ptr<Packet> p, const Ipv4Header& header, Ptr<NetDevice> oif, Socket::SocketErrno& sockerr)
{
    Ptr<Ipv4Route> r = Pick(GroupFor(header.GetDestination()), header, p);
    sockerr = r ? Socket::ERROR_NOTERROR : Socket::ERROR_NOROUTETOHOST;
    return r;
}

bool
DlcpRouting::RouteInput(Ptr<const Packet> p,
                        const Ipv4Header& header,
                        Ptr<const NetDevice> idev,
                        const UnicastForwardCallback& ucb,
                        const MulticastForwardCallback& mcb,
                        const LocalDeliverCallback& lcb,
                        const ErrorCallback& ecb)
{
    if (m_local.count(header.GetDestination().Get()) > 0)
    {
        lcb(p, header, m_ipv4->GetInterfaceForDevice(idev));
        return true;
    }
    Ptr<Ipv4Route> r = Pick(GroupFor(header.GetDestination()), header, p);
    if (!r)
    {
        ecb(p, header, Socket::ERROR_NOROUTETOHOST);
        return false;
    }
    ucb(r, p, header);
    return true;
}

void
DlcpRouting::NotifyInterfaceUp(uint32_t)
{
}

void
DlcpRouting::NotifyInterfaceDown(uint32_t)
{
}

void
DlcpRouting::NotifyAddAddress(uint32_t, Ipv4InterfaceAddress address)
{
    m_local.insert(address.GetLocal().Get());
}

void
DlcpRouting::NotifyRemoveAddress(uint32_t, Ipv4InterfaceAddress address)
{
    m_local.erase(address.GetLocal().Get());
}

void
DlcpRouting::SetIpv4(Ptr<Ipv4> ipv4)
{
    m_ipv4 = ipv4;
    for (uint32_t i = 0; i < ipv4->GetNInterfaces(); ++i)
    {
        for (uint32_t j = 0; j < ipv4->GetNAddresses(i); ++j)
        {
            m_local.insert(ipv4->GetAddress(i, j).GetLocal().Get());
        }
    }
}

void
DlcpRouting::PrintRoutingTable(Ptr<OutputStreamWrapper>, Time::Unit) const
{
}

} // namespace dlcpsim
