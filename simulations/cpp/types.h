// Plain types shared by the ns-3 components and the Python-facing API (no ns-3 headers here).
#pragma once

#include "rate_control.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace dlcpsim
{

enum class Transport : uint8_t
{
    DLCP = 0,
    TCP = 1,
};

struct FlowRecord
{
    uint32_t id = 0;
    uint8_t transport = 0;   // Transport
    uint32_t tag = 0;        // what the workload says it is (gradient, background, ...)
    uint32_t src = 0;        // host index
    uint32_t dst = 0;        // host index
    uint64_t bytes = 0;
    double start = -1.0;     // seconds: when the sender was handed the message
    double end = -1.0;       // when the receiver completed it (-1: never)
    double acked = -1.0;     // DLCP: when the sender heard STOP
    uint64_t lost_elems = 0; // DLCP: elements accepted as lost at completion
    uint64_t elems = 0;
    uint32_t packets = 0;    // DLCP: packets in the message
    uint32_t retx = 0;       // DLCP: packets retransmitted
    uint32_t probes = 0;
    uint32_t trimmed = 0;    // DLCP: TRIMMED headers the receiver got
};

/** Counters summed over every DLCP host. */
struct HostCounters
{
    uint64_t data_sent = 0;     // DATA packets handed to the network (first pass + retransmissions)
    uint64_t control_sent = 0;  // PROBE, BITMAP, STOP
    uint64_t data_received = 0; // DATA packets arriving at receivers (any verdict)
    uint64_t trimmed_received = 0;
    uint64_t control_received = 0;
    uint64_t duplicates = 0;
    uint64_t late = 0;
    uint64_t unknown = 0;
    // Seconds the senders' pacers added over their lines: per data packet, its pacing interval less its
    // time at the host's line (TransportParams::line_rate), summed over every DLCP sender.
    double pacing_excess_s = 0;
};

/** DLCP transport settings of every host (docs/transport.md; scenario [dlcp.transport]). */
struct TransportParams
{
    uint32_t payload_bytes = 8192;
    uint32_t elem_size = 4;
    uint16_t job_id = 1;
    uint32_t token = 0x5eed;
    // Every sender's rate-control rule (dlcp/rate_control.py; a sender starts at its max_rate), or, when
    // not empty, each host's own (index: host), as the controller paces each host at its share of the fabric.
    RateRule rate;
    std::vector<RateRule> host_rates;
    double initial_rto = 1e-3;
    double max_rto = 20e-3;
    uint32_t wire_overhead = 0; // bytes added below UDP per packet (IPv4 + link)
    double line_rate = 0;       // bytes/s of a host's line (for HostCounters::pacing_excess_s; 0: not counted)
    // pFabric-style priority (the pfabric baseline): when not empty, every data packet's class
    // is the top data class minus the number of these thresholds (bytes, ascending) at or below
    // the message's remaining bytes, so the shortest remaining message goes first (SRPT).
    std::vector<uint64_t> srpt_thresholds;
    uint8_t top_data_class = 6;
    // Retransmissions paced like first passes (true), or sent at once as the host stack's
    // receive thread does (false; charged to the pacer either way).
    bool pace_retx = true;
    // An idle sender's next packet waits a random part of one packet's time at its rate (senders are not
    // phase-locked; docs/simulations.md, "Host pacing").
    bool phase_jitter = true;
};

} // namespace dlcpsim
