// The read side of the Simulation facade (api.h): records, job iterations, host counters
// and the switch totals summed over every queue (ns-3's queue discs and DLCP's ports).
#include "queue_disc.h"
#include "simulation_impl.h"

#include "ns3/red-queue-disc.h"
#include "ns3/simulator.h"

#include <algorithm>

namespace dlcpsim
{

using namespace ns3;

uint32_t
Simulation::NumRecords() const
{
    return static_cast<uint32_t>(m_impl->records.size());
}

const FlowRecord&
Simulation::Record(uint32_t i) const
{
    return m_impl->records.at(i);
}

std::vector<double>
Simulation::JobIterationEnds(uint32_t job) const
{
    return m_impl->jobs.at(job)->IterationEnds();
}

HostCounters
Simulation::Hosts() const
{
    return m_impl->host_counters;
}

SwitchTotals
Simulation::Switches() const
{
    SwitchTotals t;
    size_t k = DLCP_NUM_PRIORITY_CLASSES;
    for (auto* v : {&t.forwarded, &t.dropped, &t.trimmed, &t.overflow, &t.pushed_out, &t.marked})
    {
        v->assign(k, 0);
    }
    for (auto* list : {&m_impl->switch_qdiscs, &m_impl->host_qdiscs})
    {
        bool on_switch = list == &m_impl->switch_qdiscs;
        for (const Ptr<QueueDisc>& q : *list)
        {
            const QueueDisc::Stats& s = q->GetStats();
            t.qdisc_received += s.nTotalReceivedPackets;
            t.qdisc_dropped += s.nTotalDroppedPackets;
            t.qdisc_sent += s.nTotalSentPackets;
            if (!on_switch)
            {
                continue;
            }
            t.switch_forwarded += s.nTotalSentPackets;
            if (Ptr<DlcpQueueDisc> d = DynamicCast<DlcpQueueDisc>(q))
            {
                AddClassCounters(t, d->Counters(), k);
                continue;
            }
            // A FIFO or RED queue: one class, counted as the port model's FIFO disciplines count it
            // (RED's drops of packets it could not mark as `dropped`, the buffer's as `overflow`).
            uint64_t red = s.GetNDroppedPackets(RedQueueDisc::UNFORCED_DROP) +
                           s.GetNDroppedPackets(RedQueueDisc::FORCED_DROP);
            t.forwarded[DEFAULT_QUEUE] += s.nTotalSentPackets;
            t.marked[DEFAULT_QUEUE] += s.nTotalMarkedPackets;
            t.dropped[DEFAULT_QUEUE] += red;
            t.overflow[DEFAULT_QUEUE] += s.nTotalDroppedPackets - red;
        }
    }
    for (auto* list : {&m_impl->switch_ports, &m_impl->host_ports})
    {
        bool on_switch = list == &m_impl->switch_ports;
        for (const Ptr<DlcpPort>& port : *list)
        {
            const PortStats& s = port->Queue().Stats();
            t.qdisc_received += s.received;
            t.qdisc_dropped += s.dropped;
            t.qdisc_sent += s.sent;
            if (!on_switch)
            {
                continue;
            }
            t.switch_forwarded += s.sent;
            t.switch_arrivals += s.received;
            t.arrival_depth_sum += s.depth_sum;
            t.arrival_depth_peak = std::max<uint64_t>(t.arrival_depth_peak, s.depth_peak);
            AddClassCounters(t, port->Queue().Counters(), k);
        }
    }
    t.host_rx_packets = m_impl->host_rx;
    for (const auto& r : m_impl->dlcp_routing)
    {
        if (r)
        {
            t.route_lookups += r->Lookups();
        }
    }
    for (const auto& sw : m_impl->dlcp_switch)
    {
        if (sw)
        {
            t.route_lookups += sw->Lookups();
            t.switch_dropped += sw->Dropped();
        }
    }
    return t;
}

uint32_t
Simulation::TcpConnections() const
{
    return m_impl->tcp ? m_impl->tcp->Connections() : 0;
}

double
Simulation::HostRate(uint32_t host) const
{
    return m_impl->hosts.at(host)->Rate();
}

double
Simulation::HostPacingExcess(uint32_t host) const
{
    return m_impl->hosts.at(host)->PacingExcess();
}

uint64_t
Simulation::Events() const
{
    return Simulator::GetEventCount();
}

double
Simulation::Now() const
{
    return Simulator::Now().GetSeconds();
}

} // namespace dlcpsim
