// A host on DLCP's port model: its DLCP transport, and the lean TCP where a run uses it, receive
// their packets from its ports directly (HostPortSink) and send to them directly (HostOutput;
// SimulationImpl::ConnectHostPorts, host_ports.cc), with no socket, UDP, TCP or IPv4 between; the
// rest goes through its IP stack.
#pragma once

#include "lean_tcp.h"
#include "port.h"
#include "routing.h"
#include "transport.h"
#include "wire.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace dlcpsim
{

/** A host's side of DLCP's port model: DLCP datagrams straight to its transport, TCP segments straight to the
 *  lean TCP when the run uses it, the rest to its IP stack. */
class HostPortSink : public FrameSink
{
  public:
    HostPortSink(uint32_t address, DlcpHost* host, LeanTcp* tcp, uint64_t* rx)
        : m_address(address),
          m_host(host),
          m_tcp(tcp),
          m_rx(rx)
    {
    }

    void ReceiveFrame(DlcpPort* in, Frame&& f) override
    {
        if (f.ip.GetDestination().Get() == m_address)
        {
            if (f.ip.GetProtocol() == IPPROTO_UDP && f.ip.GetFragmentOffset() == 0 && f.head_len >= UDP_HEADER_BYTES &&
                GetField(f.head, 2, 2) == DLCP_UDP_PORT)
            {
                ++*m_rx; // what the IPv4 stack's LocalDeliver trace counts on the other path
                m_host->Deliver(f.head + UDP_HEADER_BYTES, f.head_len - UDP_HEADER_BYTES, f.l4,
                                UDP_HEADER_BYTES);
                return;
            }
            if (m_tcp != nullptr && f.ip.GetProtocol() == IPPROTO_TCP)
            {
                ++*m_rx;
                m_tcp->Receive(f);
                return;
            }
        }
        in->DeliverUp(std::move(f));
    }

  private:
    uint32_t m_address;
    DlcpHost* m_host;
    LeanTcp* m_tcp;
    uint64_t* m_rx;
};

/** Where a host hands the frames it sends past its IP stack: the port its routing picks. */
class HostOutput
{
  public:
    HostOutput(DlcpRouting* routing, std::vector<DlcpPort*> by_iface)
        : m_routing(routing),
          m_byIface(std::move(by_iface))
    {
    }

    void Send(Frame&& f)
    {
        int32_t iface = m_routing->PickInterface(f.ip, f.head, f.head_len);
        if (iface < 0 || static_cast<size_t>(iface) >= m_byIface.size() || m_byIface[iface] == nullptr)
        {
            return; // no route: lost, as a socket's send without a route
        }
        m_byIface[iface]->Enqueue(std::move(f));
    }

  private:
    DlcpRouting* m_routing;
    std::vector<DlcpPort*> m_byIface;
};

} // namespace dlcpsim
