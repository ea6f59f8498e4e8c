// Shares over the pairs active now, as dlcp/rate_control.py's active_rates (the spec): a pair's rate is the
// headroom of its smallest share of a switch port its data crosses, where a port's load is the sum, over the
// pairs with a message in flight across it now, of the fraction of the pair's packets that crosses it (added in
// ascending (sender, receiver) order, as the core adds them, so the rates are bit-identical).
// tests/test_rate_control.py checks it against the core on random fabrics and active sets. No ns-3 header, so
// api.h (and cppyy) can show it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dlcpsim
{

class ActiveShares
{
  public:
    /** Every switch port's rate, bits/s, by port index (<= 0: not a bottleneck, not counted). */
    void SetPorts(const std::vector<double>& rate_bps)
    {
        m_rate = rate_bps;
        m_pairsAt.assign(rate_bps.size(), {});
        m_load.assign(rate_bps.size(), 0.0);
    }

    void SetHeadroom(double headroom)
    {
        m_headroom = headroom;
    }

    double Headroom() const
    {
        return m_headroom;
    }

    /** The ports a pair's packets may cross, with the fraction of them on each (rate_control.sprayed). */
    void SetPath(uint32_t src, uint32_t dst, const std::vector<uint32_t>& ports, const std::vector<double>& fractions)
    {
        if (ports.size() != fractions.size())
        {
            throw std::invalid_argument("ActiveShares::SetPath: one fraction per port");
        }
        Pair& p = m_pairs[Key(src, dst)];
        if (p.active > 0)
        {
            throw std::logic_error("ActiveShares::SetPath: the pair is active");
        }
        p.hops.clear();
        for (size_t i = 0; i < ports.size(); ++i)
        {
            if (ports[i] >= m_rate.size())
            {
                throw std::out_of_range("ActiveShares::SetPath: unknown port");
            }
            p.hops.emplace_back(ports[i], fractions[i]);
        }
    }

    bool Known(uint32_t src, uint32_t dst) const
    {
        return m_pairs.count(Key(src, dst)) != 0;
    }

    /** One more message of the pair in flight (a pair without a path is not counted). */
    void Start(uint32_t src, uint32_t dst)
    {
        uint64_t key = Key(src, dst);
        auto it = m_pairs.find(key);
        if (it == m_pairs.end() || it->second.active++ > 0)
        {
            return;
        }
        for (auto [port, fraction] : it->second.hops)
        {
            m_pairsAt[port][key] = fraction;
            Reload(port);
        }
    }

    /** One message of the pair fewer in flight. */
    void Stop(uint32_t src, uint32_t dst)
    {
        uint64_t key = Key(src, dst);
        auto it = m_pairs.find(key);
        if (it == m_pairs.end() || it->second.active == 0 || --it->second.active > 0)
        {
            return;
        }
        for (auto [port, fraction] : it->second.hops)
        {
            m_pairsAt[port].erase(key);
            Reload(port);
        }
    }

    /** The pair's rate now, bits/s (as the core's int), counting it active; 0: no counted port (unpaced). */
    int64_t Rate(uint32_t src, uint32_t dst) const
    {
        auto it = m_pairs.find(Key(src, dst));
        if (it == m_pairs.end() || it->second.active == 0)
        {
            return 0;
        }
        double r = std::numeric_limits<double>::infinity();
        bool any = false;
        for (auto [port, fraction] : it->second.hops)
        {
            if (m_rate[port] > 0)
            {
                r = std::min(r, m_rate[port] / m_load[port]);
                any = true;
            }
        }
        return any ? std::max<int64_t>(1, static_cast<int64_t>(r * m_headroom)) : 0;
    }

    /** Pairs counted at a port now. */
    uint32_t Pairs(uint32_t port) const
    {
        return static_cast<uint32_t>(m_pairsAt.at(port).size());
    }

  private:
    struct Pair
    {
        std::vector<std::pair<uint32_t, double>> hops;
        uint32_t active = 0;
    };

    static uint64_t Key(uint32_t src, uint32_t dst)
    {
        return (static_cast<uint64_t>(src) << 32) | dst;
    }

    void Reload(uint32_t port)
    {
        double load = 0.0;
        for (const auto& [pair, fraction] : m_pairsAt[port]) // ascending (sender, receiver), as the core adds
        {
            load += fraction;
        }
        m_load[port] = load;
    }

    std::vector<double> m_rate;
    // per port: the active pairs crossing it (key: sender << 32 | receiver) -> the fraction of their packets
    std::vector<std::map<uint64_t, double>> m_pairsAt;
    std::vector<double> m_load;
    std::unordered_map<uint64_t, Pair> m_pairs;
    double m_headroom = 1.0;
};

} // namespace dlcpsim
