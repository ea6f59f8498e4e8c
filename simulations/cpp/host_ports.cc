#include "host_ports.h"

#include "simulation_impl.h"

#include "ns3/ipv4-header.h"
#include "ns3/ipv4-l3-protocol.h"
#include "ns3/packet.h"
#include "ns3/udp-header.h"
#include "ns3/udp-l4-protocol.h"

#include <memory>
#include <vector>

namespace dlcpsim
{

using namespace ns3;

void
SimulationImpl::ConnectHostPorts(uint32_t h, Ptr<Node> node, Ptr<Ipv4L3Protocol> ip)
{
    std::vector<DlcpPort*> by_iface(ip->GetNInterfaces(), nullptr);
    for (uint32_t i = 0; i < ip->GetNInterfaces(); ++i)
    {
        if (Ptr<DlcpPort> port = DynamicCast<DlcpPort>(ip->GetNetDevice(i)))
        {
            by_iface[i] = PeekPointer(port);
            host_sinks.push_back(
                std::make_unique<HostPortSink>(host_address[h].Get(), PeekPointer(hosts[h]), lean_tcp, &host_rx));
            port->SetSink(host_sinks.back().get());
        }
    }
    host_outputs.at(h) = std::make_unique<HostOutput>(PeekPointer(dlcp_routing[node->GetId()]), std::move(by_iface));
    HostOutput* out = host_outputs[h].get();
    Ipv4Address src = host_address[h];
    // What UdpSocketImpl, UdpL4Protocol and Ipv4L3Protocol put around a datagram from DLCP's port
    // (checksums off, ns-3's default; TTL 64; no fragmentation: the scenario's MTU carries a packet).
    hosts[h]->SetOutput([this, out, src](Ptr<Packet> p, uint32_t dst) {
        UdpHeader udp;
        udp.SetSourcePort(DLCP_UDP_PORT);
        udp.SetDestinationPort(DLCP_UDP_PORT);
        p->AddHeader(udp);
        Ipv4Header ip;
        ip.SetSource(src);
        ip.SetDestination(host_address[dst]);
        ip.SetProtocol(UdpL4Protocol::PROT_NUMBER);
        ip.SetPayloadSize(p->GetSize());
        ip.SetTtl(64);
        out->Send(Frame::From(ip, p));
    });
}

} // namespace dlcpsim
