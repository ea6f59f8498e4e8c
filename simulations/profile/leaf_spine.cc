// A profiling driver: the `dlcp sim bench` fabric and traffic built from C++ alone,
// so that callgrind and perf see only the simulator (cppyy's JIT emits AVX-512
// code that valgrind cannot run, and Python's start-up would blur a perf profile).
//
// A leaf-spine (hosts 0..H-1, then leaves, then spines, as simulations/topology.py
// numbers them), DLCP routing and transport, every host sending `kb` KiB to a
// permutation partner in two rounds 100 us apart; the same routes runner.py
// installs (a host's uplink; a leaf: its own hosts directly, the rest over every
// spine; a spine: the destination's leaf). Prints packets delivered and events.
// Build and run: docs/results.md, "Where the instructions go".
#include "api.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace dlcpsim;

int
main(int argc, char** argv)
{
    uint32_t leaves = argc > 1 ? std::stoul(argv[1]) : 16;
    uint32_t hpl = argc > 2 ? std::stoul(argv[2]) : 16;
    uint32_t spines = argc > 3 ? std::stoul(argv[3]) : 8;
    uint64_t kb = argc > 4 ? std::stoull(argv[4]) : 256;
    std::string routing = argc > 5 ? argv[5] : "dlcp";
    std::string ports = argc > 6 ? argv[6] : "dlcp"; // "ns3": ns-3's devices and queue discs
    // "dctcp" or "tcp": the TCP baselines (RED/ECN or drop-tail switch queues, TCP messages) on the TCP stack
    // of argument 8 ("lean" or "ns3", as the scenario's tcp.stack)
    std::string baseline = argc > 7 ? argv[7] : "dlcp";
    std::string stack = argc > 8 ? argv[8] : "lean";
    bool tcp = baseline == "dctcp" || baseline == "tcp";
    uint32_t hosts = leaves * hpl;
    double rate = 100e9, delay = 1e-6;

    Simulation sim(1);
    for (uint32_t n = 0; n < hosts + leaves + spines; ++n)
    {
        sim.AddNode(n < hosts);
    }
    for (uint32_t h = 0; h < hosts; ++h)
    {
        sim.AddLink(h, hosts + h / hpl, rate, delay);
    }
    for (uint32_t l = 0; l < leaves; ++l)
    {
        for (uint32_t s = 0; s < spines; ++s)
        {
            sim.AddLink(hosts + l, hosts + leaves + s, rate, delay);
        }
    }
    sim.SetMtu(9000);
    sim.SetSwitchQueue(baseline == "dctcp" ? "red_ecn" : baseline == "tcp" ? "fifo" : "dlcp", 1000, 32);
    if (tcp)
    {
        // simulate.py's settings: segments that fill the MTU with the timestamp option, 1 ms minimum RTO.
        sim.SetTcp(baseline == "dctcp" ? "dctcp" : "newreno", 1e-3, 9000 - 52, 4 << 20);
        sim.SetTcpStack(stack);
    }
    sim.SetRouting(routing);
    sim.SetPorts(ports);
    TransportParams tp;
    tp.payload_bytes = 8192;
    tp.rate.max_rate = rate / 8;
    tp.rate.min_rate = tp.rate.max_rate / 1000;
    tp.rate.increase = tp.rate.max_rate / 100;
    tp.wire_overhead = 22;
    sim.SetTransport(tp);
    sim.Build();
    if (routing == "dlcp")
    {
        std::vector<uint32_t> spine_nodes(spines);
        std::iota(spine_nodes.begin(), spine_nodes.end(), hosts + leaves);
        for (uint32_t h = 0; h < hosts; ++h)
        {
            sim.SetGroup(h, 0, {hosts + h / hpl});
            sim.SetDefaultGroup(h, 0);
        }
        for (uint32_t l = 0; l < leaves; ++l)
        {
            uint32_t node = hosts + l;
            std::vector<int32_t> gid(hosts);
            sim.SetGroup(node, 0, spine_nodes);
            for (uint32_t i = 0; i < hpl; ++i)
            {
                sim.SetGroup(node, 1 + i, {l * hpl + i});
            }
            for (uint32_t h = 0; h < hosts; ++h)
            {
                gid[h] = h / hpl == l ? static_cast<int32_t>(1 + h % hpl) : 0;
            }
            sim.SetHostGroups(node, gid);
        }
        for (uint32_t s = 0; s < spines; ++s)
        {
            uint32_t node = hosts + leaves + s;
            std::vector<int32_t> gid(hosts);
            for (uint32_t l = 0; l < leaves; ++l)
            {
                sim.SetGroup(node, l, {hosts + l});
            }
            for (uint32_t h = 0; h < hosts; ++h)
            {
                gid[h] = static_cast<int32_t>(h / hpl);
            }
            sim.SetHostGroups(node, gid);
        }
    }
    std::mt19937_64 rng(1);
    MessageMeta meta;
    meta.transport = tcp ? 1 : 0;
    meta.priority = 3;
    meta.loss_bound = 0.01;
    meta.drop_fractions = {0.5, 0.2, 0.2, 0.1};
    for (int round = 0; round < 2; ++round)
    {
        std::vector<uint32_t> perm(hosts);
        bool fixed_point = true;
        while (fixed_point)
        {
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng);
            fixed_point = false;
            for (uint32_t h = 0; h < hosts; ++h)
            {
                fixed_point |= perm[h] == h;
            }
        }
        for (uint32_t h = 0; h < hosts; ++h)
        {
            sim.AddMessage(h, perm[h], round * 100e-6, kb * 1024, meta, 0);
        }
    }
    auto t0 = std::chrono::steady_clock::now();
    sim.Run(1.0);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    SwitchTotals sw = sim.Switches();
    std::printf("hosts %u packets %llu packet_hops %llu events %llu wall_s %.3f packets_per_s %.0f\n", hosts,
                static_cast<unsigned long long>(sw.host_rx_packets),
                static_cast<unsigned long long>(sw.switch_forwarded),
                static_cast<unsigned long long>(sim.Events()), wall, sw.host_rx_packets / wall);
    return 0;
}
