// The sender's rate-control rule, as dlcp/rate_control.py's RateRule (the spec; the host stack applies
// the same one). A pure function of (rate, loss): tests/test_rate_control.py feeds random sequences to
// both and requires the same rates. No ns-3 header, so api.h (and cppyy) can show it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dlcpsim
{

struct RateRule
{
    double max_rate = 12.5e9; // bytes/s: the ceiling, where a sender starts
    double min_rate = 12.5e6;
    double increase = 125e6;  // bytes/s added per clean verdict
    double decrease_above = 0.02;
    bool decrease_by_loss = false; // to rate * (1 - loss), at most halving; else halve

    bool Congested(double loss) const
    {
        return loss > decrease_above;
    }

    /** `sent_at`: the rate the sender had when the message began; a decrease applies to it and never
     *  raises the rate (messages under way together cut it once). */
    double Next(double rate, double loss, double sent_at) const
    {
        if (Congested(loss))
        {
            double factor = decrease_by_loss ? std::max(0.5, 1.0 - loss) : 0.5;
            return std::min(rate, std::max(min_rate, sent_at * factor));
        }
        return std::min(max_rate, rate + increase);
    }
    double Next(double rate, double loss) const
    {
        return Next(rate, loss, rate);
    }
};

/** dlcp.rate_control.first_pass_loss: the missing packets (ascending) before the last one received, over
 *  `packets`; the tail after it is still queued behind the PROBE that overtook it, not lost. */
inline double
FirstPassLoss(const std::vector<uint32_t>& missing, uint32_t packets)
{
    if (packets == 0)
    {
        return 0.0;
    }
    if (missing.size() >= packets)
    {
        return 1.0;
    }
    size_t tail = 0;
    while (tail < missing.size() && missing[missing.size() - 1 - tail] == packets - 1 - tail)
    {
        ++tail;
    }
    return static_cast<double>(missing.size() - tail) / packets;
}

} // namespace dlcpsim
