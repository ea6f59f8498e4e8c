// A host on DLCP's port model: its DLCP transport receives DLCP datagrams from its
// ports directly (HostPortSink) and sends to them directly (SimulationImpl::ConnectHostPorts,
// host_ports.cc), with no socket, UDP or IPv4 between; the rest goes through its IP stack.
#pragma once

#include "port.h"
#include "transport.h"
#include "wire.h"

#include <cstdint>
#include <utility>

namespace dlcpsim
{

/** A host's side of DLCP's port model: DLCP datagrams straight to its transport, the rest to its IP stack. */
class HostPortSink : public FrameSink
{
  public:
    HostPortSink(uint32_t address, DlcpHost* host, uint64_t* rx)
        : m_address(address),
          m_host(host),
          m_rx(rx)
    {
    }

    void ReceiveFrame(DlcpPort* in, Frame&& f) override
    {
        if (f.ip.GetDestination().Get() == m_address && f.ip.GetProtocol() == IPPROTO_UDP &&
            f.ip.GetFragmentOffset() == 0 && f.head_len >= UDP_HEADER_BYTES &&
            GetField(f.head, 2, 2) == DLCP_UDP_PORT)
        {
            ++*m_rx; // what the IPv4 stack's LocalDeliver trace counts on the other path
            m_host->Deliver(f.head + UDP_HEADER_BYTES, f.head_len - UDP_HEADER_BYTES, f.l4,
                            UDP_HEADER_BYTES);
            return;
        }
        in->DeliverUp(std::move(f));
    }

  private:
    uint32_t m_address;
    DlcpHost* m_host;
    uint64_t* m_rx;
};

} // namespace dlcpsim
