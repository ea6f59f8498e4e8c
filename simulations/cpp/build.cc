// SimulationImpl::Build: the ns-3 fabric Python describes (nodes, links, addresses,
// queues, routing, hosts), in the steps simulation_impl.h lists, in that order.
#include "queue_disc.h"
#include "simulation_impl.h"

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <array>

namespace dlcpsim
{

using namespace ns3;

class DlcpRoutingHelper : public Ipv4RoutingHelper
{
  public:
    DlcpRoutingHelper* Copy() const override
    {
        return new DlcpRoutingHelper(*this);
    }

    Ptr<Ipv4RoutingProtocol> Create(Ptr<Node>) const override
    {
        return CreateObject<DlcpRouting>();
    }
};

std::unique_ptr<PortQueue>
SimulationImpl::PortQueueFor(bool on_switch, double bps, size_t index) const
{
    // The queue discs the ns-3 path installs (InstallQueueDiscs, below): DLCP's everywhere in DLCP's runs;
    // otherwise the baseline's on switches and a drop-tail FIFO on hosts.
    if (switch_queue == "dlcp")
    {
        return std::make_unique<PortQueue>(on_switch ? &switch_config : &host_config,
                                           on_switch ? switch_limit : host_limit);
    }
    if (on_switch && switch_queue == "red_ecn")
    {
        // RED's random stream as its queue disc's on the same port; created here, as there, once per port.
        Ptr<UniformRandomVariable> uniform = CreateObject<UniformRandomVariable>();
        uniform->SetStream(RED_STREAM_BASE + static_cast<int64_t>(index));
        return std::make_unique<PortQueue>(switch_limit,
                                           std::make_unique<RedMarker>(RedParams::Dctcp(ecn_threshold, mtu, bps), uniform));
    }
    return std::make_unique<PortQueue>(on_switch ? switch_limit : host_limit, nullptr);
}

void
SimulationImpl::Build()
{
    CheckNotBuilt("Build");
    ConfigureDefaults();
    CreateNodes();
    std::vector<std::pair<Ptr<NetDevice>, bool>> devices = CreateLinks();
    InstallQueueDiscs(devices);
    InstallRouting();
    InstallHosts();
    built = true;
}

void
SimulationImpl::ConfigureDefaults()
{
    RngSeedManager::SetSeed(static_cast<uint32_t>(seed % 0xffffffffULL) + 1);
    RngSeedManager::SetRun(1);
    // TCP defaults (every TCP socket of this process; one simulation per process).
    Config::SetDefault("ns3::TcpL4Protocol::SocketType",
                       TypeIdValue(TypeId::LookupByName(tcp_variant == "dctcp" ? "ns3::TcpDctcp" : "ns3::TcpNewReno")));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(tcp_segment));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(tcp_buffer));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(tcp_buffer));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(TCP_INITIAL_CWND));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(TCP_DELACK_COUNT));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(Seconds(tcp_min_rto)));
    Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(NanoSeconds(TCP_CLOCK_GRANULARITY_NS)));
    if (tcp_variant == "dctcp")
    {
        Config::SetDefault("ns3::TcpSocketBase::UseEcn", StringValue("On"));
    }
    if (routing == "global")
    {
        Config::SetDefault("ns3::Ipv4GlobalRouting::RandomEcmpRouting", BooleanValue(true));
    }

    // Events in a std::priority_queue (one vector) rather than ns-3's default std::map (a node
    // allocated per event): 2% fewer instructions at 256 hosts under callgrind, same event order
    // (every scheduler orders by time, then by insertion). HeapScheduler was 16% worse.
    Simulator::SetScheduler(ObjectFactory("ns3::PriorityQueueScheduler"));
}

void
SimulationImpl::CreateNodes()
{
    uint32_t n = static_cast<uint32_t>(is_host.size());
    nodes.Create(n);
    // With DLCP routing only hosts run an IP stack; switches forward with DlcpSwitch (routing.h).
    bool lean = routing == "dlcp";
    InternetStackHelper stack;
    DlcpRoutingHelper dlcpHelper;
    if (lean)
    {
        stack.SetRoutingHelper(dlcpHelper);
    }
    for (uint32_t i = 0; i < n; ++i)
    {
        if (is_host[i] || !lean)
        {
            stack.Install(nodes.Get(i));
        }
        else
        {
            nodes.Get(i)->AggregateObject(CreateObject<TrafficControlLayer>());
        }
    }
}

NetDeviceContainer
SimulationImpl::LinkDevices(const LinkDesc& l)
{
    NetDeviceContainer d;
    if (port_model)
    {
        Ptr<DlcpLink> link = CreateObject<DlcpLink>();
        std::array<Ptr<DlcpPort>, 2> ends;
        for (uint32_t e = 0; e < 2; ++e)
        {
            uint32_t node = e == 0 ? l.a : l.b;
            double bps = e == 1 && l.rate_ba_bps > 0 ? l.rate_ba_bps : l.rate_bps;
            ends[e] = CreateObject<DlcpPort>();
            ends[e]->Configure(PortQueueFor(!is_host[node], bps, 2 * (&l - links.data()) + e),
                               DataRate(static_cast<uint64_t>(bps)));
            ends[e]->SetMtu(static_cast<uint16_t>(mtu));
            nodes.Get(node)->AddDevice(ends[e]);
            (is_host[node] ? host_ports : switch_ports).push_back(ends[e]);
            d.Add(ends[e]);
        }
        link->Attach(ends[0], ends[1], Seconds(l.delay_s));
    }
    else
    {
        PointToPointHelper p2p;
        p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(static_cast<uint64_t>(l.rate_bps))));
        p2p.SetDeviceAttribute("Mtu", UintegerValue(mtu));
        p2p.SetChannelAttribute("Delay", TimeValue(Seconds(l.delay_s)));
        // A one-packet device queue: the queue disc above it holds the backlog (and decides).
        p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", QueueSizeValue(QueueSize("1p")));
        d = p2p.Install(nodes.Get(l.a), nodes.Get(l.b));
        if (l.rate_ba_bps > 0)
        {
            d.Get(1)->SetAttribute("DataRate", DataRateValue(DataRate(static_cast<uint64_t>(l.rate_ba_bps))));
        }
    }
    return d;
}

std::vector<std::pair<Ptr<NetDevice>, bool>>
SimulationImpl::CreateLinks()
{
    uint32_t n = static_cast<uint32_t>(is_host.size());
    bool lean = routing == "dlcp";
    iface_to.assign(n, {});
    host_address.assign(node_of_host.size(), Ipv4Address());
    Ipv4AddressHelper addr;
    addr.SetBase("10.0.0.0", "255.255.255.252");
    uint32_t next_subnet = Ipv4Address("10.0.0.0").Get();
    std::vector<std::pair<Ptr<NetDevice>, bool>> devices; // device, on a switch
    // DLCP's port model replaces ns-3's devices, channels and queue discs wherever switches run
    // DLCP's routing, whatever their queues (DLCP's, RED/ECN or drop-tail: port.h's disciplines).
    port_model = lean && ports == "dlcp";
    for (const LinkDesc& l : links)
    {
        NetDeviceContainer d = LinkDevices(l);
        if (lean)
        {
            // Each link a /30 (a: .1, b: .2), as Ipv4AddressHelper numbers them, but only hosts
            // get an interface; a switch's port is its device index.
            std::array<uint32_t, 2> ends{l.a, l.b};
            for (uint32_t e = 0; e < 2; ++e)
            {
                Ptr<Node> node = nodes.Get(ends[e]);
                Ipv4Address a(next_subnet + 1 + e);
                if (is_host[ends[e]])
                {
                    Ptr<Ipv4> ip = node->GetObject<Ipv4>();
                    int32_t i = ip->AddInterface(d.Get(e));
                    ip->AddAddress(i, Ipv4InterfaceAddress(a, Ipv4Mask("255.255.255.252")));
                    ip->SetMetric(i, 1);
                    ip->SetUp(i);
                    iface_to[ends[e]][ends[1 - e]] = static_cast<uint32_t>(i);
                    host_address[host_of_node[ends[e]]] = a;
                }
                else
                {
                    iface_to[ends[e]][ends[1 - e]] = d.Get(e)->GetIfIndex();
                }
            }
            next_subnet += 4;
        }
        else
        {
            Ipv4InterfaceContainer ifs = addr.Assign(d);
            addr.NewNetwork();
            iface_to[l.a][l.b] = ifs.Get(0).second;
            iface_to[l.b][l.a] = ifs.Get(1).second;
            if (is_host[l.a])
            {
                host_address[host_of_node[l.a]] = ifs.GetAddress(0);
            }
            if (is_host[l.b])
            {
                host_address[host_of_node[l.b]] = ifs.GetAddress(1);
            }
        }
        if (!port_model)
        {
            devices.emplace_back(d.Get(0), !is_host[l.a]);
            devices.emplace_back(d.Get(1), !is_host[l.b]);
        }
    }
    for (uint32_t h = 0; h < host_address.size(); ++h)
    {
        book.host_of_address[host_address[h].Get()] = h;
    }
    book.dlcp_ports = switch_config.dlcp_ports;
    host_config.dlcp_ports = switch_config.dlcp_ports;
    return devices;
}

void
SimulationImpl::InstallQueueDiscs(const std::vector<std::pair<Ptr<NetDevice>, bool>>& devices)
{
    // Replace the default one on every device.
    TrafficControlHelper tch;
    for (auto& [dev, on_switch] : devices)
    {
        Ptr<TrafficControlLayer> tcl = dev->GetNode()->GetObject<TrafficControlLayer>();
        if (tcl->GetRootQueueDiscOnDevice(dev))
        {
            tch.Uninstall(dev);
        }
        TrafficControlHelper t;
        std::string kind = on_switch ? switch_queue : (switch_queue == "dlcp" ? "dlcp" : "fifo");
        uint32_t limit = on_switch ? switch_limit : host_limit;
        QueueSizeValue size(QueueSize(QueueSizeUnit::PACKETS, limit));
        if (kind == "dlcp")
        {
            t.SetRootQueueDisc("dlcpsim::DlcpQueueDisc", "MaxSize", size);
        }
        else if (kind == "red_ecn")
        {
            Ptr<PointToPointNetDevice> p = DynamicCast<PointToPointNetDevice>(dev);
            DataRateValue rate;
            p->GetAttribute("DataRate", rate);
            RedParams red = RedParams::Dctcp(ecn_threshold, mtu, static_cast<double>(rate.Get().GetBitRate()));
            t.SetRootQueueDisc("ns3::RedQueueDisc", "MaxSize", size, "UseEcn", BooleanValue(true), "UseHardDrop",
                               BooleanValue(false), "QW", DoubleValue(red.q_w), "MinTh", DoubleValue(red.min_th),
                               "MaxTh", DoubleValue(red.max_th), "LInterm", DoubleValue(red.l_interm), "Gentle",
                               BooleanValue(red.gentle), "Wait", BooleanValue(red.wait), "MeanPktSize",
                               UintegerValue(red.mean_packet_bytes), "LinkBandwidth", rate, "LinkDelay",
                               TimeValue(MicroSeconds(1)));
        }
        else
        {
            t.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", size);
        }
        QueueDiscContainer qd = t.Install(dev);
        Ptr<QueueDisc> q = qd.Get(0);
        if (Ptr<RedQueueDisc> red = DynamicCast<RedQueueDisc>(q))
        {
            // RED draws random numbers (a queue of exactly K packets marks at random). Its streams
            // are numbered by port, not by how many random variables the IP stacks created before
            // it, so the same seed gives the same marks with or without IP stacks on switches.
            red->AssignStreams(RED_STREAM_BASE + static_cast<int64_t>(switch_qdiscs.size() + host_qdiscs.size()));
        }
        if (Ptr<DlcpQueueDisc> dq = DynamicCast<DlcpQueueDisc>(q))
        {
            dq->SetConfig(on_switch ? &switch_config : &host_config);
        }
        (on_switch ? switch_qdiscs : host_qdiscs).push_back(q);
    }
}

void
SimulationImpl::InstallRouting()
{
    uint32_t n = static_cast<uint32_t>(is_host.size());
    dlcp_routing.assign(n, nullptr);
    dlcp_switch.assign(n, nullptr);
    if (routing == "dlcp")
    {
        for (uint32_t i = 0; i < n; ++i)
        {
            if (is_host[i])
            {
                Ptr<DlcpRouting> r =
                    DynamicCast<DlcpRouting>(nodes.Get(i)->GetObject<Ipv4>()->GetRoutingProtocol());
                r->SetAddressBook(&book);
                dlcp_routing[i] = r;
            }
            else
            {
                Ptr<DlcpSwitch> sw = CreateObject<DlcpSwitch>();
                nodes.Get(i)->AggregateObject(sw);
                if (port_model)
                {
                    sw->AttachPorts(nodes.Get(i), &book);
                }
                else
                {
                    sw->Attach(nodes.Get(i), &book);
                }
                dlcp_switch[i] = sw;
            }
        }
    }
    else
    {
        Ipv4GlobalRoutingHelper::PopulateRoutingTables();
    }
}

void
SimulationImpl::InstallHosts()
{
    // Hosts: a DLCP endpoint each, and a count of what IPv4 delivers to them.
    hosts.resize(node_of_host.size());
    host_outputs.resize(node_of_host.size());
    TcpMessages::Completed completed = [this](uint32_t msg) {
        records[msg].end = Simulator::Now().GetSeconds();
        auto it = tcp_waiting.find(msg);
        if (it != tcp_waiting.end())
        {
            std::function<void()> cb = std::move(it->second);
            tcp_waiting.erase(it);
            cb();
        }
    };
    if (port_model && tcp_stack == "lean")
    {
        LeanTcpParams params;
        params.dctcp = tcp_variant == "dctcp";
        params.segment = tcp_segment;
        params.min_rto_s = tcp_min_rto;
        params.buffer = tcp_buffer;
        std::vector<uint32_t> addresses;
        for (const Ipv4Address& a : host_address)
        {
            addresses.push_back(a.Get());
        }
        auto lean = std::make_unique<LeanTcp>(
            params, std::move(addresses), [this](uint32_t h, Frame&& f) { host_outputs[h]->Send(std::move(f)); },
            completed);
        lean_tcp = lean.get();
        tcp = std::move(lean);
    }
    for (uint32_t h = 0; h < node_of_host.size(); ++h)
    {
        Ptr<Node> node = nodes.Get(node_of_host[h]);
        Ptr<DlcpHost> app = CreateObject<DlcpHost>();
        app->Configure(h, transport, &host_address, &records, &host_counters, seed * 1000003ULL + h);
        if (active_pacing)
        {
            app->SetActiveShares(&shares);
        }
        node->AddApplication(app);
        app->SetStartTime(Seconds(0));
        hosts[h] = app;
        Ptr<Ipv4L3Protocol> ip = node->GetObject<Ipv4L3Protocol>();
        ip->TraceConnectWithoutContext(
            "LocalDeliver",
            MakeBoundCallback(+[](uint64_t* c, const Ipv4Header&, Ptr<const Packet>, uint32_t) { ++*c; }, &host_rx));
        if (port_model)
        {
            ConnectHostPorts(h, node, ip);
        }
    }
    if (lean_tcp == nullptr)
    {
        std::vector<Ptr<Node>> host_nodes;
        for (uint32_t node : node_of_host)
        {
            host_nodes.push_back(nodes.Get(node));
        }
        tcp = std::make_unique<TcpChannels>(std::move(host_nodes), host_address, std::move(completed));
    }
}

} // namespace dlcpsim
