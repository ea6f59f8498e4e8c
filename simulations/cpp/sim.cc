// The Simulation facade: builds the ns-3 fabric Python describes, runs it, and
// sums the statistics. Per-packet work happens only in the components.
#include "api.h"
#include "jobs.h"
#include "port.h"
#include "queue_disc.h"
#include "routing.h"
#include "tcp_channels.h"
#include "transport.h"

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <array>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

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

/** First random-number stream of the RED queue discs (one each, by port; below: ns-3's automatic ones). */
constexpr int64_t RED_STREAM_BASE = 1 << 20;

struct LinkDesc
{
    uint32_t a, b;
    double rate_bps, delay_s;
    double rate_ba_bps; // b to a, when it differs (0: rate_bps)
};

class SimulationImpl : public MessageService
{
  public:
    uint64_t seed;
    std::vector<bool> is_host;
    std::vector<uint32_t> host_of_node; // node -> host index (or UINT32_MAX)
    std::vector<uint32_t> node_of_host;
    std::vector<LinkDesc> links;
    uint32_t mtu = 1500;
    std::string switch_queue = "dlcp";
    uint32_t switch_limit = 1000;
    uint32_t ecn_threshold = 0;
    uint32_t host_limit = 100000;
    std::string routing = "dlcp";
    std::string ports = "dlcp"; // DLCP's port model (port.h) where it applies, or "ns3" devices and queue discs
    bool port_model = false;    // decided in Build()
    TransportParams transport;
    ActiveShares shares;
    bool active_pacing = false;
    std::string tcp_variant = "dctcp";
    double tcp_min_rto = 1e-3;
    uint32_t tcp_segment = 1448;
    uint32_t tcp_buffer = 4 << 20;
    DlcpSwitchConfig switch_config;
    DlcpSwitchConfig host_config; // hosts: strict priority by the packets' own classes, no selective drop
    AddressBook book;
    bool built = false;

    NodeContainer nodes;
    std::vector<Ipv4Address> host_address;
    // per node: neighbour node -> interface index
    std::vector<std::unordered_map<uint32_t, uint32_t>> iface_to;
    std::vector<Ptr<DlcpRouting>> dlcp_routing; // hosts (and nothing else with "global" routing)
    std::vector<Ptr<DlcpSwitch>> dlcp_switch;   // switches, with "dlcp" routing

    /** Node `node`'s next-hop table (DLCP routing only). */
    NextHops& TableOf(uint32_t node, const char* what)
    {
        if (node < dlcp_routing.size() && dlcp_routing[node])
        {
            return dlcp_routing[node]->Table();
        }
        if (node < dlcp_switch.size() && dlcp_switch[node])
        {
            return dlcp_switch[node]->Table();
        }
        throw std::logic_error(std::string(what) + " needs dlcp routing, Build() and an existing node");
    }
    std::vector<Ptr<QueueDisc>> switch_qdiscs, host_qdiscs;
    std::vector<Ptr<DlcpPort>> switch_ports, host_ports; // with the port model
    std::vector<std::unique_ptr<HostPortSink>> host_sinks;
    std::vector<Ptr<DlcpHost>> hosts;
    std::vector<FlowRecord> records;
    HostCounters host_counters;
    std::vector<std::unique_ptr<TrainingJob>> jobs;
    std::unique_ptr<TcpChannels> tcp;                                // TCP messages' persistent connections
    std::unordered_map<uint32_t, std::function<void()>> tcp_waiting; // message -> what runs when it completes
    uint64_t host_rx = 0;

    void CheckNotBuilt(const char* what) const
    {
        if (built)
        {
            throw std::logic_error(std::string(what) + " must come before Build()");
        }
    }

    void Build();
    /** The port model: the queue of a port (`index`: its place among every link's two ends, in link order). */
    std::unique_ptr<PortQueue> PortQueueFor(bool on_switch, double bps, size_t index) const;
    /** The port model: host `h`'s DLCP transport sends to, and receives from, its ports directly. */
    void ConnectHostPorts(uint32_t h, Ptr<Node> node, Ptr<Ipv4L3Protocol> ip);
    uint32_t Send(uint32_t src, uint32_t dst, uint64_t bytes, const MessageMeta& meta, uint32_t tag,
                  std::function<void()> on_delivered) override;
    uint32_t NewRecord(uint32_t src, uint32_t dst, uint64_t bytes, uint8_t transport, uint32_t tag);
    void Launch(uint32_t id, const MessageMeta& meta, std::function<void()> on_delivered);
};

uint32_t
SimulationImpl::NewRecord(uint32_t src, uint32_t dst, uint64_t bytes, uint8_t transport_kind, uint32_t tag)
{
    FlowRecord r;
    r.id = static_cast<uint32_t>(records.size());
    r.transport = transport_kind;
    r.tag = tag;
    r.src = src;
    r.dst = dst;
    r.bytes = bytes;
    r.start = Simulator::Now().GetSeconds();
    records.push_back(r);
    return r.id;
}

uint32_t
SimulationImpl::Send(uint32_t src, uint32_t dst, uint64_t bytes, const MessageMeta& meta, uint32_t tag,
                     std::function<void()> on_delivered)
{
    if (src >= node_of_host.size() || dst >= node_of_host.size() || src == dst)
    {
        throw std::invalid_argument("message endpoints must be two different hosts");
    }
    uint32_t id = NewRecord(src, dst, bytes, meta.transport, tag);
    Launch(id, meta, std::move(on_delivered));
    return id;
}

void
SimulationImpl::Launch(uint32_t id, const MessageMeta& meta, std::function<void()> on_delivered)
{
    FlowRecord& rec = records[id];
    rec.start = Simulator::Now().GetSeconds();
    uint32_t src = rec.src, dst = rec.dst;
    uint64_t bytes = rec.bytes;
    if (meta.transport == static_cast<uint8_t>(Transport::DLCP))
    {
        SendSpec s;
        s.msg_id = id;
        s.kind = meta.kind;
        s.layer = meta.layer;
        s.priority = meta.priority;
        s.shape.elems_per_packet = transport.payload_bytes / transport.elem_size;
        s.shape.num_elems = (bytes + transport.elem_size - 1) / transport.elem_size;
        s.shape.loss_bound = meta.loss_bound;
        for (size_t c = 0; c < s.drop_fractions.size(); ++c)
        {
            s.drop_fractions[c] = c < meta.drop_fractions.size() ? meta.drop_fractions[c] : 0.0;
        }
        rec.elems = s.shape.num_elems;
        hosts[dst]->Expect(id, src, id, s.shape, std::move(on_delivered));
        hosts[src]->Send(id, dst, s, nullptr);
        return;
    }
    // TCP: appended to the stream of the pair's persistent connection (tcp_channels.h).
    if (on_delivered)
    {
        tcp_waiting.emplace(id, std::move(on_delivered));
    }
    tcp->Send(src, dst, rec.tag, bytes, id);
}

std::unique_ptr<PortQueue>
SimulationImpl::PortQueueFor(bool on_switch, double bps, size_t index) const
{
    // The queue discs the ns-3 path installs (Build, below): DLCP's everywhere in DLCP's runs; otherwise
    // the baseline's on switches and a drop-tail FIFO on hosts.
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
    RngSeedManager::SetSeed(static_cast<uint32_t>(seed % 0xffffffffULL) + 1);
    RngSeedManager::SetRun(1);
    // TCP defaults (every TCP socket of this process; one simulation per process).
    Config::SetDefault("ns3::TcpL4Protocol::SocketType",
                       TypeIdValue(TypeId::LookupByName(tcp_variant == "dctcp" ? "ns3::TcpDctcp" : "ns3::TcpNewReno")));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(tcp_segment));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(tcp_buffer));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(tcp_buffer));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(1));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(Seconds(tcp_min_rto)));
    Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MicroSeconds(1)));
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

    // Queue discs: replace the default one on every device.
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

    dlcp_routing.assign(n, nullptr);
    dlcp_switch.assign(n, nullptr);
    if (lean)
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

    // Hosts: a DLCP endpoint each, and a count of what IPv4 delivers to them.
    hosts.resize(node_of_host.size());
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
    std::vector<Ptr<Node>> host_nodes;
    for (uint32_t node : node_of_host)
    {
        host_nodes.push_back(nodes.Get(node));
    }
    tcp = std::make_unique<TcpChannels>(std::move(host_nodes), host_address, [this](uint32_t msg) {
        records[msg].end = Simulator::Now().GetSeconds();
        auto it = tcp_waiting.find(msg);
        if (it != tcp_waiting.end())
        {
            std::function<void()> cb = std::move(it->second);
            tcp_waiting.erase(it);
            cb();
        }
    });
    built = true;
}

void
SimulationImpl::ConnectHostPorts(uint32_t h, Ptr<Node> node, Ptr<Ipv4L3Protocol> ip)
{
    std::vector<DlcpPort*> by_iface(ip->GetNInterfaces(), nullptr);
    for (uint32_t i = 0; i < ip->GetNInterfaces(); ++i)
    {
        if (Ptr<DlcpPort> port = DynamicCast<DlcpPort>(ip->GetNetDevice(i)))
        {
            by_iface[i] = PeekPointer(port);
            host_sinks.push_back(std::make_unique<HostPortSink>(host_address[h].Get(), PeekPointer(hosts[h]), &host_rx));
            port->SetSink(host_sinks.back().get());
        }
    }
    DlcpRouting* routing = PeekPointer(dlcp_routing[node->GetId()]);
    Ipv4Address src = host_address[h];
    // What UdpSocketImpl, UdpL4Protocol and Ipv4L3Protocol put around a datagram from DLCP's port
    // (checksums off, ns-3's default; TTL 64; no fragmentation: the scenario's MTU carries a packet).
    hosts[h]->SetOutput([this, routing, src, by_iface = std::move(by_iface)](Ptr<Packet> p, uint32_t dst) {
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
        Frame f = Frame::From(ip, p);
        int32_t iface = routing->PickInterface(f.ip, f.head, f.head_len);
        if (iface < 0 || static_cast<size_t>(iface) >= by_iface.size() || by_iface[iface] == nullptr)
        {
            return; // no route: lost, as a UDP socket's SendTo without a route
        }
        by_iface[iface]->Enqueue(std::move(f));
    });
}

// ---- Simulation -------------------------------------------------------------

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

static BufferPolicy
ParseBufferPolicy(const std::string& policy)
{
    if (policy == "push_out")
    {
        return BufferPolicy::PUSH_OUT;
    }
    if (policy == "tail_drop")
    {
        return BufferPolicy::TAIL_DROP;
    }
    throw std::invalid_argument("buffer policy must be push_out or tail_drop, got " + policy);
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
Simulation::AddDlcpPort(uint16_t port)
{
    m_impl->switch_config.dlcp_ports.insert(port);
}

static ClassRule
MakeRule(int32_t rule_priority, const std::vector<uint32_t>& vm, uint8_t action, uint32_t queue)
{
    if (vm.size() != 10 || action > 2 || queue >= DLCP_NUM_PRIORITY_CLASSES)
    {
        throw std::invalid_argument("a class rule has 5 (value, mask) pairs, an action 0..2 and a queue 0..7");
    }
    ClassRule r;
    r.rule_priority = rule_priority;
    r.job_value = vm[0], r.job_mask = vm[1];
    r.type_value = vm[2], r.type_mask = vm[3];
    r.priority_value = vm[4], r.priority_mask = vm[5];
    r.drop_value = vm[6], r.drop_mask = vm[7];
    r.kind_value = vm[8], r.kind_mask = vm[9];
    r.action = static_cast<ClassAction>(action);
    r.queue = queue;
    return r;
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

// ---- QueueDiscHarness -------------------------------------------------------

struct QueueDiscHarness::Impl
{
    DlcpSwitchConfig config;
    Ptr<DlcpQueueDisc> qd;         // ns-3's queue disc, or
    std::unique_ptr<PortQueue> pq; // DLCP's port model's queue (port.h)
};

static std::vector<uint8_t>
FromHex(const std::string& hex)
{
    std::vector<uint8_t> out(hex.size() / 2);
    for (size_t i = 0; i < out.size(); ++i)
    {
        out[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
    }
    return out;
}

static std::string
ToHex(const std::vector<uint8_t>& b)
{
    static const char* d = "0123456789abcdef";
    std::string s;
    for (uint8_t x : b)
    {
        s += d[x >> 4];
        s += d[x & 15];
    }
    return s;
}

QueueDiscHarness::QueueDiscHarness(uint32_t limit_packets, bool port_model)
    : m_impl(std::make_unique<Impl>())
{
    if (port_model)
    {
        m_impl->pq = std::make_unique<PortQueue>(&m_impl->config, limit_packets);
        return;
    }
    m_impl->qd = CreateObjectWithAttributes<DlcpQueueDisc>(
        "MaxSize", QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, limit_packets)));
    m_impl->qd->SetConfig(&m_impl->config);
    m_impl->qd->Initialize();
}

QueueDiscHarness::~QueueDiscHarness()
{
    if (m_impl->qd)
    {
        m_impl->qd->Dispose();
    }
}

void
QueueDiscHarness::AddDlcpPort(uint16_t port)
{
    m_impl->config.dlcp_ports.insert(port);
}

void
QueueDiscHarness::AddClassRule(int32_t rule_priority, const std::vector<uint32_t>& value_mask, uint8_t action,
                               uint32_t queue)
{
    m_impl->config.AddRule(MakeRule(rule_priority, value_mask, action, queue));
}

void
QueueDiscHarness::SetThreshold(uint32_t queue, uint32_t drop_class, uint8_t action, uint32_t threshold)
{
    m_impl->config.SetThreshold(queue, drop_class, static_cast<OnCongestion>(action), threshold);
}

void
QueueDiscHarness::SetBufferPolicy(const std::string& policy)
{
    m_impl->config.buffer_policy = ParseBufferPolicy(policy);
}

int32_t
QueueDiscHarness::Enqueue(const std::string& ipv4_hex)
{
    std::vector<uint8_t> bytes = FromHex(ipv4_hex);
    Ptr<Packet> p = Create<Packet>(bytes.data(), static_cast<uint32_t>(bytes.size()));
    Ipv4Header ip;
    p->RemoveHeader(ip);
    if (m_impl->pq)
    {
        bool ok = m_impl->pq->Enqueue(Frame::From(ip, p));
        return ok ? m_impl->pq->LastQueue() : -1;
    }
    auto item = Create<Ipv4QueueDiscItem>(p, Address(), Ipv4L3Protocol::PROT_NUMBER, ip);
    bool ok = m_impl->qd->Enqueue(item);
    return ok ? m_impl->qd->LastQueue() : -1;
}

std::string
QueueDiscHarness::Dequeue()
{
    Ptr<Packet> p;
    if (m_impl->pq)
    {
        Frame f;
        if (!m_impl->pq->Dequeue(f))
        {
            return "";
        }
        p = f.l4->Copy();
        p->AddHeader(f.ip);
    }
    else
    {
        Ptr<QueueDiscItem> item = m_impl->qd->Dequeue();
        if (!item)
        {
            return "";
        }
        Ptr<Ipv4QueueDiscItem> ipItem = DynamicCast<Ipv4QueueDiscItem>(item);
        p = item->GetPacket()->Copy();
        p->AddHeader(ipItem->GetHeader());
    }
    std::vector<uint8_t> out(p->GetSize());
    p->CopyData(out.data(), out.size());
    return ToHex(out);
}

int32_t
QueueDiscHarness::LastDequeuedQueue() const
{
    return m_impl->pq ? m_impl->pq->LastDequeuedQueue() : m_impl->qd->LastDequeuedQueue();
}

const ClassCounters&
QueueDiscHarness::Counters() const
{
    return m_impl->pq ? m_impl->pq->Counters() : m_impl->qd->Counters();
}

uint64_t
QueueDiscHarness::Forwarded(uint32_t cls) const
{
    return Counters().forwarded.at(cls);
}

uint64_t
QueueDiscHarness::Dropped(uint32_t cls) const
{
    return Counters().dropped.at(cls);
}

uint64_t
QueueDiscHarness::Trimmed(uint32_t cls) const
{
    return Counters().trimmed.at(cls);
}

uint64_t
QueueDiscHarness::Overflow(uint32_t cls) const
{
    return Counters().overflow.at(cls);
}

uint64_t
QueueDiscHarness::PushedOut(uint32_t cls) const
{
    return Counters().pushed_out.at(cls);
}

uint32_t
QueueDiscHarness::Depth(uint32_t cls) const
{
    return m_impl->pq ? m_impl->pq->Depth(cls) : m_impl->qd->GetInternalQueue(cls)->GetNPackets();
}

} // namespace dlcpsim
