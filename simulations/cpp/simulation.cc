// The Simulation facade (api.h): the fabric and its settings before Build(), the routing
// tables after it, the traffic, and the run. Per-packet work happens only in the components.
#include "simulation_impl.h"

#include "ns3/nstime.h"
#include "ns3/simulator.h"

#include <memory>
#include <stdexcept>

namespace dlcpsim
{

using namespace ns3;

Simulation::Simulation(uint64_t seed)
    : m_impl(std::make_unique<SimulationImpl>())
{
    m_impl->seed = seed;
}

Simulation::~Simulation()
{
    Simulator::Destroy();
}

uint32_t
Simulation::AddNode(bool host)
{
    m_impl->CheckNotBuilt("AddNode");
    uint32_t id = static_cast<uint32_t>(m_impl->is_host.size());
    m_impl->is_host.push_back(host);
    if (host)
    {
        m_impl->host_of_node.push_back(static_cast<uint32_t>(m_impl->node_of_host.size()));
        m_impl->node_of_host.push_back(id);
    }
    else
    {
        m_impl->host_of_node.push_back(UINT32_MAX);
    }
    return id;
}

void
Simulation::AddLink(uint32_t a, uint32_t b, double rate_bps, double delay_s, double rate_ba_bps)
{
    m_impl->CheckNotBuilt("AddLink");
    if (a >= m_impl->is_host.size() || b >= m_impl->is_host.size() || a == b)
    {
        throw std::invalid_argument("a link joins two different existing nodes");
    }
    m_impl->links.push_back(LinkDesc{a, b, rate_bps, delay_s, rate_ba_bps});
}

void
Simulation::SetMtu(uint32_t mtu)
{
    m_impl->mtu = mtu;
}

void
Simulation::SetSwitchQueue(const std::string& kind, uint32_t limit_packets, uint32_t ecn_threshold)
{
    if (kind != "dlcp" && kind != "fifo" && kind != "red_ecn")
    {
        throw std::invalid_argument("switch queue must be dlcp, fifo or red_ecn, got " + kind);
    }
    m_impl->switch_queue = kind;
    m_impl->switch_limit = limit_packets;
    m_impl->ecn_threshold = ecn_threshold;
    m_impl->switch_config.ecn_threshold = ecn_threshold;
}

void
Simulation::SetBufferPolicy(const std::string& policy)
{
    m_impl->switch_config.buffer_policy = ParseBufferPolicy(policy);
}

void
Simulation::SetSpraying(bool spray)
{
    m_impl->book.spray = spray;
}

void
Simulation::SetHostQueueLimit(uint32_t limit_packets)
{
    m_impl->host_limit = limit_packets;
}

void
Simulation::SetRouting(const std::string& kind)
{
    if (kind != "dlcp" && kind != "global")
    {
        throw std::invalid_argument("routing must be dlcp or global, got " + kind);
    }
    m_impl->routing = kind;
}

void
Simulation::SetPorts(const std::string& kind)
{
    m_impl->CheckNotBuilt("SetPorts");
    if (kind != "dlcp" && kind != "ns3")
    {
        throw std::invalid_argument("ports must be dlcp or ns3, got " + kind);
    }
    m_impl->ports = kind;
}

bool
Simulation::UsesPortModel() const
{
    return m_impl->port_model;
}

void
Simulation::SetTransport(const TransportParams& params)
{
    m_impl->transport = params;
}

void
Simulation::SetActivePacing(bool on)
{
    m_impl->CheckNotBuilt("SetActivePacing");
    m_impl->active_pacing = on;
}

ActiveShares&
Simulation::Shares()
{
    return m_impl->shares;
}

void
Simulation::SetTcp(const std::string& variant, double min_rto_s, uint32_t segment_bytes, uint32_t buffer_bytes)
{
    if (variant != "dctcp" && variant != "newreno")
    {
        throw std::invalid_argument("tcp variant must be dctcp or newreno, got " + variant);
    }
    m_impl->tcp_variant = variant;
    m_impl->tcp_min_rto = min_rto_s;
    m_impl->tcp_segment = segment_bytes;
    m_impl->tcp_buffer = buffer_bytes;
}

void
Simulation::SetTcpStack(const std::string& kind)
{
    m_impl->CheckNotBuilt("SetTcpStack");
    if (kind != "lean" && kind != "ns3")
    {
        throw std::invalid_argument("tcp stack must be lean or ns3, got " + kind);
    }
    m_impl->tcp_stack = kind;
}

bool
Simulation::UsesLeanTcp() const
{
    return m_impl->lean_tcp != nullptr;
}

void
Simulation::AddDlcpPort(uint16_t port)
{
    m_impl->switch_config.dlcp_ports.insert(port);
}

void
Simulation::AddClassRule(int32_t rule_priority, const std::vector<uint32_t>& value_mask, uint8_t action, uint32_t queue)
{
    m_impl->switch_config.AddRule(MakeRule(rule_priority, value_mask, action, queue));
}

void
Simulation::SetDlcpThreshold(uint32_t queue, uint32_t drop_class, uint8_t action, uint32_t threshold)
{
    if (action > 2)
    {
        throw std::invalid_argument("threshold action is 0 (admit), 1 (drop) or 2 (trim)");
    }
    m_impl->switch_config.SetThreshold(queue, drop_class, static_cast<OnCongestion>(action), threshold);
}

void
Simulation::Build()
{
    m_impl->Build();
}

void
Simulation::SetGroup(uint32_t node, uint32_t gid, const std::vector<uint32_t>& next_nodes)
{
    NextHops& table = m_impl->TableOf(node, "SetGroup");
    std::vector<uint32_t> ifs;
    for (uint32_t nb : next_nodes)
    {
        auto it = m_impl->iface_to[node].find(nb);
        if (it == m_impl->iface_to[node].end())
        {
            throw std::invalid_argument("next hop is not a neighbour of the node");
        }
        ifs.push_back(it->second);
    }
    table.SetGroup(gid, ifs);
}

void
Simulation::SetHostGroups(uint32_t node, const std::vector<int32_t>& host_gid)
{
    NextHops& table = m_impl->TableOf(node, "SetHostGroups");
    for (uint32_t h = 0; h < host_gid.size(); ++h)
    {
        if (host_gid[h] >= 0)
        {
            table.SetHostGroup(h, static_cast<uint32_t>(host_gid[h]));
        }
    }
}

void
Simulation::SetDefaultGroup(uint32_t node, uint32_t gid)
{
    m_impl->TableOf(node, "SetDefaultGroup").SetDefaultGroup(gid);
}

uint32_t
Simulation::AddMessage(uint32_t src_host, uint32_t dst_host, double start_s, uint64_t bytes, const MessageMeta& meta,
                       uint32_t tag)
{
    if (!m_impl->built)
    {
        throw std::logic_error("AddMessage needs Build()");
    }
    if (src_host >= m_impl->node_of_host.size() || dst_host >= m_impl->node_of_host.size() || src_host == dst_host)
    {
        throw std::invalid_argument("message endpoints must be two different hosts");
    }
    SimulationImpl* impl = m_impl.get();
    if (meta.transport == static_cast<uint8_t>(Transport::TCP))
    {
        // At set-up, before any message, as a job's rendezvous (an event at time 0, after the nodes'
        // initialisation: ns-3's traffic control cannot send before it).
        Simulator::Schedule(Seconds(0), [impl, src_host, dst_host, tag]() { impl->tcp->Open(src_host, dst_host, tag); });
    }
    uint32_t id = impl->NewRecord(src_host, dst_host, bytes, meta.transport, tag);
    impl->records[id].start = start_s;
    Simulator::Schedule(Seconds(start_s), [impl, id, meta]() { impl->Launch(id, meta, nullptr); });
    return id;
}

uint32_t
Simulation::AddJob(const JobSpec& job)
{
    if (!m_impl->built)
    {
        throw std::logic_error("AddJob needs Build()");
    }
    size_t layers = job.layer_bytes.size();
    if (job.workers.empty() || layers == 0 || job.forward_s.size() != layers || job.backward_s.size() != layers ||
        job.priority.size() != layers || job.push_bound.size() != layers || job.pull_bound.size() != layers ||
        (job.mode == 0 && job.servers.empty()) || job.mode > 1)
    {
        throw std::invalid_argument("job: workers, servers (PS) and one entry per layer in every per-layer list");
    }
    SimulationImpl* impl = m_impl.get();
    auto OpenAtStart = [impl](uint32_t a, uint32_t b, uint32_t tag) {
        Simulator::Schedule(Seconds(0), [impl, a, b, tag]() { impl->tcp->Open(a, b, tag); });
    };
    if (job.transport == static_cast<uint8_t>(Transport::TCP))
    {
        // The job's connections at set-up, as its rendezvous makes them: each worker to each server (PS), each
        // worker to the next on the ring.
        for (size_t w = 0; w < job.workers.size(); ++w)
        {
            if (job.mode == 0)
            {
                for (uint32_t server : job.servers)
                {
                    if (server != job.workers[w])
                    {
                        OpenAtStart(job.workers[w], server, job.tag);
                    }
                }
            }
            else if (job.workers.size() > 1)
            {
                OpenAtStart(job.workers[w], job.workers[(w + 1) % job.workers.size()], job.tag);
            }
        }
    }
    m_impl->jobs.push_back(std::make_unique<TrainingJob>(job, m_impl.get()));
    m_impl->jobs.back()->Start();
    return static_cast<uint32_t>(m_impl->jobs.size() - 1);
}

void
Simulation::Run(double stop_s)
{
    Simulator::Stop(Seconds(stop_s));
    Simulator::Run();
}

} // namespace dlcpsim
