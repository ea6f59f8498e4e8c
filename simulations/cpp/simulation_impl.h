// The state behind the Simulation facade (api.h): what Python describes before
// Build(), the fabric Build() makes of it (build.cc), and what a run adds up.
// Internal to the library: it includes ns-3's headers, which api.h does not.
#pragma once

#include "api.h"
#include "host_ports.h"
#include "jobs.h"
#include "lean_tcp.h"
#include "port.h"
#include "routing.h"
#include "switch_config.h"
#include "tcp_channels.h"
#include "transport.h"

#include "ns3/ipv4-address.h"
#include "ns3/ipv4-l3-protocol.h"
#include "ns3/net-device-container.h"
#include "ns3/net-device.h"
#include "ns3/node-container.h"
#include "ns3/queue-disc.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dlcpsim
{

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
    std::string tcp_stack = "ns3"; // "lean": the lean TCP (lean_tcp.h) where the port model runs
    DlcpSwitchConfig switch_config;
    DlcpSwitchConfig host_config; // hosts: strict priority by the packets' own classes, no selective drop
    AddressBook book;
    bool built = false;

    ns3::NodeContainer nodes;
    std::vector<ns3::Ipv4Address> host_address;
    // per node: neighbour node -> interface index
    std::vector<std::unordered_map<uint32_t, uint32_t>> iface_to;
    std::vector<ns3::Ptr<DlcpRouting>> dlcp_routing; // hosts (and nothing else with "global" routing)
    std::vector<ns3::Ptr<DlcpSwitch>> dlcp_switch;   // switches, with "dlcp" routing

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
    std::vector<ns3::Ptr<ns3::QueueDisc>> switch_qdiscs, host_qdiscs;
    std::vector<ns3::Ptr<DlcpPort>> switch_ports, host_ports; // with the port model
    std::vector<std::unique_ptr<HostPortSink>> host_sinks;
    std::vector<std::unique_ptr<HostOutput>> host_outputs; // per host, with the port model
    std::vector<ns3::Ptr<DlcpHost>> hosts;
    std::vector<FlowRecord> records;
    HostCounters host_counters;
    std::vector<std::unique_ptr<TrainingJob>> jobs;
    std::unique_ptr<TcpMessages> tcp; // TCP messages' persistent connections: ns-3's sockets or the lean TCP
    LeanTcp* lean_tcp = nullptr;      // `tcp`, when it is the lean TCP
    std::unordered_map<uint32_t, std::function<void()>> tcp_waiting; // message -> what runs when it completes
    uint64_t host_rx = 0;

    void CheckNotBuilt(const char* what) const
    {
        if (built)
        {
            throw std::logic_error(std::string(what) + " must come before Build()");
        }
    }

    /** The fabric (build.cc), in the steps below, in this order. */
    void Build();
    /** Seed, TCP defaults and the event scheduler (process-wide: one simulation per process). */
    void ConfigureDefaults();
    /** The nodes, with an IP stack where one runs. */
    void CreateNodes();
    /** Every link's devices (or ports) and addresses; returns the ns-3 devices that need a queue disc,
     *  each with whether it is on a switch (none with the port model). */
    std::vector<std::pair<ns3::Ptr<ns3::NetDevice>, bool>> CreateLinks();
    /** One link's two ends: DLCP's ports, or ns-3's point-to-point devices. */
    ns3::NetDeviceContainer LinkDevices(const LinkDesc& l);
    /** Replace the default queue disc of each device with the scenario's. */
    void InstallQueueDiscs(const std::vector<std::pair<ns3::Ptr<ns3::NetDevice>, bool>>& devices);
    /** DLCP's routing on hosts and forwarding on switches, or ns-3's global routing. */
    void InstallRouting();
    /** A DLCP endpoint on each host, and the TCP channels between hosts. */
    void InstallHosts();
    /** The port model: the queue of a port (`index`: its place among every link's two ends, in link order). */
    std::unique_ptr<PortQueue> PortQueueFor(bool on_switch, double bps, size_t index) const;
    /** The port model: host `h`'s DLCP transport sends to, and receives from, its ports directly (host_ports.cc). */
    void ConnectHostPorts(uint32_t h, ns3::Ptr<ns3::Node> node, ns3::Ptr<ns3::Ipv4L3Protocol> ip);

    // Messages (messages.cc)
    uint32_t Send(uint32_t src, uint32_t dst, uint64_t bytes, const MessageMeta& meta, uint32_t tag,
                  std::function<void()> on_delivered) override;
    uint32_t NewRecord(uint32_t src, uint32_t dst, uint64_t bytes, uint8_t transport, uint32_t tag);
    void Launch(uint32_t id, const MessageMeta& meta, std::function<void()> on_delivered);
};

} // namespace dlcpsim
