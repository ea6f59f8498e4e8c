#include "routing.h"

#include "dlcp_constants.h"
#include "wire.h"

#include "ns3/ipv4-queue-disc-item.h"
#include "ns3/log.h"
#include "ns3/net-device.h"
#include "ns3/packet.h"
#include "ns3/traffic-control-layer.h"

namespace dlcpsim
{

using namespace ns3;

NS_LOG_COMPONENT_DEFINE("DlcpRouting");
NS_OBJECT_ENSURE_REGISTERED(DlcpRouting);
NS_OBJECT_ENSURE_REGISTERED(DlcpSwitch);

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

uint64_t
PathHash(const Ipv4Header& header, const Packet* p, const AddressBook* book)
{
    uint8_t l4[MIN_DLCP_UDP_LENGTH];
    uint32_t n = 0;
    if (p && (header.GetProtocol() == IPPROTO_UDP || header.GetProtocol() == IPPROTO_TCP))
    {
        n = p->CopyData(l4, sizeof(l4));
    }
    return PathHash(header, l4, n, book);
}

uint64_t
PathHash(const Ipv4Header& header, const uint8_t* l4, uint32_t n, const AddressBook* book)
{
    uint64_t key = (static_cast<uint64_t>(header.GetSource().Get()) << 32) | header.GetDestination().Get();
    uint64_t entropy = header.GetProtocol();
    if (l4 && (header.GetProtocol() == IPPROTO_UDP || header.GetProtocol() == IPPROTO_TCP))
    {
        if (n >= 4)
        {
            entropy = (entropy << 32) | GetField(l4, 0, 4); // source and destination ports
        }
        if (header.GetProtocol() == IPPROTO_UDP && n >= MIN_DLCP_UDP_LENGTH)
        {
            uint16_t dport = static_cast<uint16_t>(GetField(l4, 2, 2));
            const uint8_t* h = l4 + UDP_HEADER_BYTES;
            bool dlcp_port = dport == DLCP_UDP_PORT || (book && book->dlcp_ports.count(dport) > 0);
            if (dlcp_port && (book == nullptr || book->spray) && VersionOf(h) == DLCP_VERSION &&
                PacketTypeOf(h) == DLCP_TYPE_DATA)
            {
                // seq ^ msg_id, as DLCP's switches (p4src/common/classification.p4): one-packet messages spread too
                uint64_t seq = GetField(h, DLCP_OFF_SEQ, DLCP_SIZE_SEQ);
                entropy ^= (seq ^ GetField(h, DLCP_OFF_MSG_ID, DLCP_SIZE_MSG_ID)) << 8;
            }
        }
    }
    return Mix(key ^ Mix(entropy));
}

void
NextHops::SetGroup(uint32_t gid, const std::vector<uint32_t>& ports)
{
    if (m_groups.size() <= gid)
    {
        m_groups.resize(gid + 1);
    }
    m_groups[gid] = ports;
}

void
NextHops::SetHostGroup(uint32_t host, uint32_t gid)
{
    if (m_hostGroup.size() <= host)
    {
        m_hostGroup.resize(host + 1, -1);
    }
    m_hostGroup[host] = static_cast<int32_t>(gid);
}

// ---- DlcpSwitch --------------------------------------------------------------

TypeId
DlcpSwitch::GetTypeId()
{
    static TypeId tid = TypeId("dlcpsim::DlcpSwitch").SetParent<Object>().AddConstructor<DlcpSwitch>();
    return tid;
}

void
DlcpSwitch::Attach(Ptr<Node> node, const AddressBook* book)
{
    m_book = book;
    m_tc = node->GetObject<TrafficControlLayer>();
    NS_ABORT_MSG_IF(!m_tc, "DlcpSwitch needs a TrafficControlLayer on its node");
    m_ports.clear();
    for (uint32_t i = 0; i < node->GetNDevices(); ++i)
    {
        m_ports.push_back(node->GetDevice(i));
    }
    node->RegisterProtocolHandler(MakeCallback(&DlcpSwitch::Receive, this), IPV4_ETHERTYPE, nullptr);
}

void
DlcpSwitch::Receive(Ptr<NetDevice>, Ptr<const Packet> p, uint16_t, const Address&, const Address&,
                    NetDevice::PacketType)
{
    Ptr<Packet> packet = p->Copy(); // shares the bytes: only the header is cut off
    Ipv4Header ip;
    packet->RemoveHeader(ip);
    m_lookups++;
    int32_t port = m_table.Pick(m_table.GroupFor(m_book, ip.GetDestination()), ip, PeekPointer(packet), m_book);
    if (port < 0 || static_cast<size_t>(port) >= m_ports.size() || ip.GetTtl() <= 1)
    {
        m_dropped++;
        return;
    }
    ip.SetTtl(ip.GetTtl() - 1);
    const Ptr<NetDevice>& out = m_ports[port];
    StaticCast<TrafficControlLayer>(m_tc)->Send(
        out, Create<Ipv4QueueDiscItem>(packet, out->GetBroadcast(), IPV4_ETHERTYPE, ip));
}

void
DlcpSwitch::AttachPorts(Ptr<Node> node, const AddressBook* book)
{
    m_book = book;
    m_dlcpPorts.clear();
    for (uint32_t i = 0; i < node->GetNDevices(); ++i)
    {
        Ptr<DlcpPort> port = DynamicCast<DlcpPort>(node->GetDevice(i));
        NS_ABORT_MSG_IF(!port, "DlcpSwitch::AttachPorts: device " << i << " is not a DlcpPort");
        port->SetSink(this);
        m_dlcpPorts.push_back(PeekPointer(port));
    }
}

void
DlcpSwitch::ReceiveFrame(DlcpPort*, Frame&& frame)
{
    m_lookups++;
    Ipv4Header& ip = frame.ip;
    int32_t port =
        m_table.Pick(m_table.GroupFor(m_book, ip.GetDestination()), ip, frame.head, frame.head_len, m_book);
    if (port < 0 || static_cast<size_t>(port) >= m_dlcpPorts.size() || ip.GetTtl() <= 1)
    {
        m_dropped++;
        return;
    }
    ip.SetTtl(ip.GetTtl() - 1);
    m_dlcpPorts[port]->Enqueue(std::move(frame));
}

void
DlcpSwitch::DoDispose()
{
    m_ports.clear();
    m_dlcpPorts.clear();
    m_tc = nullptr;
    Object::DoDispose();
}

// ---- DlcpRouting (hosts) -------------------------------------------------------

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
DlcpRouting::Lookup(const Ipv4Header& header, const Packet* p)
{
    m_lookups++;
    int32_t iface = m_table.Pick(m_table.GroupFor(m_book, header.GetDestination()), header, p, m_book);
    return iface < 0 ? nullptr : RouteVia(static_cast<uint32_t>(iface));
}

Ptr<Ipv4Route>
DlcpRouting::RouteOutput(Ptr<Packet> p, const Ipv4Header& header, Ptr<NetDevice> oif, Socket::SocketErrno& sockerr)
{
    Ptr<Ipv4Route> r = Lookup(header, PeekPointer(p));
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
    Ptr<Ipv4Route> r = Lookup(header, PeekPointer(p));
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
