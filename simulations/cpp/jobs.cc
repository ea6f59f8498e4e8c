#include "jobs.h"

#include "dlcp_constants.h"

#include "ns3/simulator.h"

#include <algorithm>
#include <cmath>

namespace dlcpsim
{

using namespace ns3;


TrainingJob::TrainingJob(const JobSpec& spec, MessageService* service)
    : m_spec(spec),
      m_service(service),
      m_workers(static_cast<uint32_t>(spec.workers.size())),
      m_layers(static_cast<uint32_t>(spec.layer_bytes.size()))
{
    size_t n = static_cast<size_t>(spec.iterations) * m_layers * m_workers;
    m_state.assign(m_workers, Worker{});
    m_layerDone.assign(n, 0);
    m_gradReady.assign(n, 0);
    m_ringSent.assign(n, 0);
    m_ringRecv.assign(n, 0);
    m_pushes.assign(static_cast<size_t>(spec.iterations) * m_layers, 0);
    m_doneCount.assign(spec.iterations, 0);
    m_iterEnd.assign(spec.iterations, -1.0);
}

void
TrainingJob::Start()
{
    for (uint32_t w = 0; w < m_workers; ++w)
    {
        Simulator::Schedule(Seconds(m_spec.start), &TrainingJob::Advance, this, w);
    }
}

MessageMeta
TrainingJob::Meta(bool first_half, uint32_t layer) const
{
    MessageMeta m;
    m.transport = m_spec.transport;
    m.layer = static_cast<uint16_t>(layer);
    m.priority = m_spec.priority[layer];
    if (m_spec.mode == 0)
    {
        m.kind = first_half ? DLCP_KIND_PUSH : DLCP_KIND_PULL;
    }
    else
    {
        m.kind = first_half ? DLCP_KIND_REDUCE_SCATTER : DLCP_KIND_ALL_GATHER;
    }
    m.loss_bound = first_half ? m_spec.push_bound[layer] : m_spec.pull_bound[layer];
    m.drop_fractions = first_half ? m_spec.push_drop_fractions : m_spec.pull_drop_fractions;
    return m;
}

void
TrainingJob::Advance(uint32_t w)
{
    Worker& s = m_state[w];
    if (s.busy || s.phase == Phase::DONE)
    {
        return;
    }
    double t;
    if (s.phase == Phase::FORWARD)
    {
        // A layer's forward pass needs its parameters from the previous iteration.
        if (s.iter > 0 && !m_layerDone[Idx(s.iter - 1, s.layer, w)])
        {
            return;
        }
        t = m_spec.forward_s[s.layer];
    }
    else
    {
        t = m_spec.backward_s[s.layer];
    }
    s.busy = true;
    Simulator::Schedule(Seconds(t), &TrainingJob::ComputeDone, this, w);
}

void
TrainingJob::ComputeDone(uint32_t w)
{
    Worker& s = m_state[w];
    s.busy = false;
    if (s.phase == Phase::FORWARD)
    {
        if (++s.layer == static_cast<int32_t>(m_layers))
        {
            s.phase = Phase::BACKWARD;
            s.layer = static_cast<int32_t>(m_layers) - 1;
        }
    }
    else
    {
        GradientReady(s.iter, static_cast<uint32_t>(s.layer), w);
        if (--s.layer < 0)
        {
            s.layer = 0;
            s.phase = ++s.iter < m_spec.iterations ? Phase::FORWARD : Phase::DONE;
        }
    }
    Advance(w);
}

void
TrainingJob::GradientReady(uint32_t iter, uint32_t layer, uint32_t w)
{
    m_gradReady[Idx(iter, layer, w)] = 1;
    if (m_spec.mode == 0)
    {
        uint32_t server = m_spec.servers[layer % m_spec.servers.size()];
        m_service->Send(m_spec.workers[w], server, m_spec.layer_bytes[layer], Meta(true, layer), m_spec.tag,
                        [this, iter, layer]() { OnPush(iter, layer); });
    }
    else
    {
        RingSend(iter, layer, w);
    }
}

void
TrainingJob::OnPush(uint32_t iter, uint32_t layer)
{
    if (++m_pushes[static_cast<size_t>(iter) * m_layers + layer] < m_workers)
    {
        return;
    }
    uint32_t server = m_spec.servers[layer % m_spec.servers.size()];
    for (uint32_t w = 0; w < m_workers; ++w)
    {
        m_service->Send(server, m_spec.workers[w], m_spec.layer_bytes[layer], Meta(false, layer), m_spec.tag,
                        [this, iter, layer, w]() { LayerDone(iter, layer, w); });
    }
}

void
TrainingJob::RingSend(uint32_t iter, uint32_t layer, uint32_t w)
{
    uint32_t steps = 2 * (m_workers - 1);
    size_t i = Idx(iter, layer, w);
    if (steps == 0)
    {
        LayerDone(iter, layer, w);
        return;
    }
    // Step k goes once this worker's gradient is ready and it holds step k-1 from its predecessor.
    while (m_gradReady[i] && m_ringSent[i] < steps && m_ringRecv[i] >= m_ringSent[i])
    {
        uint32_t step = m_ringSent[i];
        bool reduce = step < m_workers - 1;
        m_ringSent[i]++;
        uint32_t next = (w + 1) % m_workers;
        uint64_t bytes = RingStepBytes(layer, w, step);
        if (bytes == 0)
        { // an empty chunk (uneven ring_weights): no message, the next worker holds the step at once
            Simulator::ScheduleNow(&TrainingJob::OnRingStep, this, iter, layer, next);
            continue;
        }
        m_service->Send(m_spec.workers[w], m_spec.workers[next], bytes, Meta(reduce, layer), m_spec.tag,
                        [this, iter, layer, next]() { OnRingStep(iter, layer, next); });
    }
}

uint64_t
TrainingJob::RingStepBytes(uint32_t layer, uint32_t w, uint32_t step) const
{
    uint64_t bytes = m_spec.layer_bytes[layer];
    if (m_spec.ring_weights.empty())
    {
        return (bytes + m_workers - 1) / m_workers;
    }
    // As host/collectives.py: reduce-scatter step s sends chunk w - s, all-gather step j chunk w + 1 - j.
    uint32_t chunk = step < m_workers - 1 ? (w + m_workers - step) % m_workers
                                          : (w + 1 + m_workers - (step - (m_workers - 1))) % m_workers;
    return static_cast<uint64_t>(std::llround(static_cast<double>(bytes) * m_spec.ring_weights[chunk]));
}

void
TrainingJob::OnRingStep(uint32_t iter, uint32_t layer, uint32_t w)
{
    size_t i = Idx(iter, layer, w);
    m_ringRecv[i]++;
    if (m_ringRecv[i] == 2 * (m_workers - 1))
    {
        LayerDone(iter, layer, w);
    }
    RingSend(iter, layer, w);
}

void
TrainingJob::LayerDone(uint32_t iter, uint32_t layer, uint32_t w)
{
    size_t i = Idx(iter, layer, w);
    if (m_layerDone[i])
    {
        return;
    }
    m_layerDone[i] = 1;
    if (++m_doneCount[iter] == static_cast<uint64_t>(m_layers) * m_workers)
    {
        m_iterEnd[iter] = Simulator::Now().GetSeconds();
    }
    Advance(w);
}

} // namespace dlcpsim
