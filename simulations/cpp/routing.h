// O(1) next-hop routing with per-packet spraying (docs/protocol.md section 6).
//
// Python computes, for every node, the equal-cost next hops towards every host
// (topology.py) and hands them down as groups of output interfaces. A lookup is
// two array indexings: destination address -> host index (one hash map shared by
// the whole fabric), host index -> group. DLCP data packets are sprayed by a hash
// of the 5-tuple and the DLCP sequence number, as the P4 ECMP does; every other
// packet (TCP, DLCP control) hashes its 5-tuple only and keeps one path.
// ns-3's global routing, by contrast, scans its whole table on every packet.
#pragma once

#include "ns3/ipv4-route.h"
#include "ns3/ipv4-routing-protocol.h"
#include "ns3/ipv4.h"

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

    /** Define group `gid` as these output interfaces (equal-cost next hops). */
    void SetGroup(uint32_t gid, const std::vector<uint32_t>& interfaces);
    /** Traffic to host `host` leaves by group `gid`. */
    void SetHostGroup(uint32_t host, uint32_t gid);
    /** Traffic to any address not otherwise routed leaves by group `gid` (a host's uplink). */
    void SetDefaultGroup(uint32_t gid)
    {
        m_default = static_cast<int32_t>(gid);
    }

    uint64_t Lookups() const
    {
        return m_lookups;
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
    int32_t GroupFor(ns3::Ipv4Address dst) const;
    ns3::Ptr<ns3::Ipv4Route> Pick(int32_t gid, const ns3::Ipv4Header& header, ns3::Ptr<const ns3::Packet> p);
    ns3::Ptr<ns3::Ipv4Route> RouteVia(uint32_t interface);

    ns3::Ptr<ns3::Ipv4> m_ipv4;
    const AddressBook* m_book = nullptr;
    std::vector<std::vector<uint32_t>> m_groups;
    std::vector<int32_t> m_hostGroup;
    int32_t m_default = -1;
    std::vector<ns3::Ptr<ns3::Ipv4Route>> m_routeVia; // per interface, built once
    std::unordered_set<uint32_t> m_local;
    uint64_t m_lookups = 0;
};

} // namespace dlcpsim
