// O(1) next-hop routing with per-packet spraying (docs/protocol.md section 6).
//
// Python computes, for every node, the equal-cost next hops towards every host
// (topology.py) and hands them down as groups of output interfaces. A lookup is
// two array indexings: destination address -> host index (one hash map shared by
// the whole fabric), host index -> group. DLCP data packets are sprayed by a hash
// of the 5-tuple and the DLCP seq ^ msg_id, as the P4 ECMP does; every other
// packet (TCP, DLCP control) hashes its 5-tuple only and keeps one path.
// ns-3's global routing, by contrast, scans its whole table on every packet.
//
// Hosts run ns-3's IPv4 stack with DlcpRouting. Switches, with "dlcp" routing, run
// no IP stack at all: DlcpSwitch takes each packet from the device, reads its IPv4
// header once, decrements the TTL, picks the output port and hands the packet to
// that port's queue disc, as a P4 switch's ingress does. This skips, per hop,
// ns-3's IPv4 receive and forward path (two packet copies, interface and route
// callbacks, trace sources) -- about a third of the simulator's instructions at
// 256 hosts (docs/results.md, "Where the instructions go").
#pragma once

#include "port.h"

#include "ns3/ipv4-route.h"
#include "ns3/ipv4-routing-protocol.h"
#include "ns3/ipv4.h"
#include "ns3/net-device.h"
#include "ns3/node.h"

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace dlcpsim
{

/** Fabric-wide: host addresses and the DLCP ports (one instance per simulation). */
struct AddressBook
{
    std::unordered_map<uint32_t, uint32_t> host_of_address;
    std::unordered_set<uint16_t> dlcp_ports;
    bool spray = true; // DLCP data packets: per-packet spraying (false: per flow, the ablation)
};

/** The path hash of a packet (IPv4 header, then L4 onwards in `p`): 5-tuple, plus DLCP's
 *  sequence number for DLCP data when spraying. Every node picks among equal-cost ports by it. */
uint64_t PathHash(const ns3::Ipv4Header& header, const ns3::Packet* p, const AddressBook* book);
/** The same hash from the first `n` bytes of L4 (a Frame's cached head: port.h). */
uint64_t PathHash(const ns3::Ipv4Header& header, const uint8_t* l4, uint32_t n, const AddressBook* book);

/** Next-hop groups by destination host: the table both DlcpRouting and DlcpSwitch look up. */
class NextHops
{
  public:
    void SetGroup(uint32_t gid, const std::vector<uint32_t>& ports);
    void SetHostGroup(uint32_t host, uint32_t gid);

    /** The group towards `dst`, or -1. */
    int32_t GroupFor(const AddressBook* book, ns3::Ipv4Address dst) const
    {
        if (book != nullptr)
        {
            auto it = book->host_of_address.find(dst.Get());
            if (it != book->host_of_address.end() && it->second < m_hostGroup.size() && m_hostGroup[it->second] >= 0)
            {
                return m_hostGroup[it->second];
            }
        }
        return m_default;
    }

    void SetDefaultGroup(uint32_t gid)
    {
        m_default = static_cast<int32_t>(gid);
    }

    /** The port out of group `gid` for this packet (-1: no such group). */
    int32_t Pick(int32_t gid, const ns3::Ipv4Header& header, const ns3::Packet* p, const AddressBook* book) const
    {
        if (gid < 0 || static_cast<size_t>(gid) >= m_groups.size() || m_groups[gid].empty())
        {
            return -1;
        }
        const std::vector<uint32_t>& g = m_groups[gid];
        if (g.size() == 1)
        {
            return static_cast<int32_t>(g[0]);
        }
        return static_cast<int32_t>(g[PathHash(header, p, book) % g.size()]);
    }

    /** As above, hashing the first `n` bytes of L4. */
    int32_t Pick(int32_t gid, const ns3::Ipv4Header& header, const uint8_t* l4, uint32_t n, const AddressBook* book) const
    {
        if (gid < 0 || static_cast<size_t>(gid) >= m_groups.size() || m_groups[gid].empty())
        {
            return -1;
        }
        const std::vector<uint32_t>& g = m_groups[gid];
        if (g.size() == 1)
        {
            return static_cast<int32_t>(g[0]);
        }
        return static_cast<int32_t>(g[PathHash(header, l4, n, book) % g.size()]);
    }

  private:
    std::vector<std::vector<uint32_t>> m_groups;
    std::vector<int32_t> m_hostGroup;
    int32_t m_default = -1;
};

/** A switch without an IP stack: IPv4 header in, O(1) next hop, the output port's queue disc
 *  (ns-3 devices), or the output DlcpPort's queue (DLCP's port model, port.h). */
class DlcpSwitch : public ns3::Object, public FrameSink
{
  public:
    static ns3::TypeId GetTypeId();

    /** Take over every device of `node` (call after its devices and TrafficControlLayer exist). */
    void Attach(ns3::Ptr<ns3::Node> node, const AddressBook* book);
    /** Take over `node`'s DlcpPorts (port i: device i), receiving their frames. */
    void AttachPorts(ns3::Ptr<ns3::Node> node, const AddressBook* book);
    /** A frame from one of the ports: next hop, TTL, the output port's queue. */
    void ReceiveFrame(DlcpPort* in, Frame&& frame) override;

    NextHops& Table()
    {
        return m_table;
    }

    uint64_t Lookups() const
    {
        return m_lookups;
    }

    /** Packets dropped here: no route, or TTL expired. */
    uint64_t Dropped() const
    {
        return m_dropped;
    }

  private:
    void Receive(ns3::Ptr<ns3::NetDevice> device,
                 ns3::Ptr<const ns3::Packet> p,
                 uint16_t protocol,
                 const ns3::Address& from,
                 const ns3::Address& to,
                 ns3::NetDevice::PacketType type);
    void DoDispose() override;

    const AddressBook* m_book = nullptr;
    NextHops m_table;
    std::vector<ns3::Ptr<ns3::NetDevice>> m_ports; // by device index on the node
    std::vector<DlcpPort*> m_dlcpPorts;            // the same, with DLCP's port model
    ns3::Ptr<ns3::Object> m_tc;                     // the node's TrafficControlLayer
    uint64_t m_lookups = 0;
    uint64_t m_dropped = 0;
};

class DlcpRouting : public ns3::Ipv4RoutingProtocol
{
  public:
    static ns3::TypeId GetTypeId();
    DlcpRouting();
    ~DlcpRouting() override;

    void SetAddressBook(const AddressBook* book)
    {
        m_book = book;
    }

    /** Groups of output interfaces (equal-cost next hops) by destination host; the default
     *  group carries traffic to any address not otherwise routed (a host's uplink). */
    NextHops& Table()
    {
        return m_table;
    }

    uint64_t Lookups() const
    {
        return m_lookups;
    }

    /** The output interface for a packet a host sends past its IP stack (counted as a lookup). */
    int32_t PickInterface(const ns3::Ipv4Header& header, const uint8_t* l4, uint32_t n)
    {
        m_lookups++;
        return m_table.Pick(m_table.GroupFor(m_book, header.GetDestination()), header, l4, n, m_book);
    }

    ns3::Ptr<ns3::Ipv4Route> RouteOutput(ns3::Ptr<ns3::Packet> p,
                                         const ns3::Ipv4Header& header,
                                         ns3::Ptr<ns3::NetDevice> oif,
                                         ns3::Socket::SocketErrno& sockerr) override;
    bool RouteInput(ns3::Ptr<const ns3::Packet> p,
                    const ns3::Ipv4Header& header,
                    ns3::Ptr<const ns3::NetDevice> idev,
                    const UnicastForwardCallback& ucb,
                    const MulticastForwardCallback& mcb,
                    const LocalDeliverCallback& lcb,
                    const ErrorCallback& ecb) override;
    void NotifyInterfaceUp(uint32_t interface) override;
    void NotifyInterfaceDown(uint32_t interface) override;
    void NotifyAddAddress(uint32_t interface, ns3::Ipv4InterfaceAddress address) override;
    void NotifyRemoveAddress(uint32_t interface, ns3::Ipv4InterfaceAddress address) override;
    void SetIpv4(ns3::Ptr<ns3::Ipv4> ipv4) override;
    void PrintRoutingTable(ns3::Ptr<ns3::OutputStreamWrapper> stream,
                           ns3::Time::Unit unit = ns3::Time::S) const override;

  private:
    ns3::Ptr<ns3::Ipv4Route> Lookup(const ns3::Ipv4Header& header, const ns3::Packet* p);
    ns3::Ptr<ns3::Ipv4Route> RouteVia(uint32_t interface);

    ns3::Ptr<ns3::Ipv4> m_ipv4;
    const AddressBook* m_book = nullptr;
    NextHops m_table;
    std::vector<ns3::Ptr<ns3::Ipv4Route>> m_routeVia; // per interface, built once
    std::unordered_set<uint32_t> m_local;
    uint64_t m_lookups = 0;
};

} // namespace dlcpsim
