// Training jobs as message workloads: parameter-server and ring all-reduce
// iterations over per-layer tensors with per-layer compute times. Forward passes
// wait for each layer's parameters (its pull, or its all-reduce) from the previous
// iteration, so the order in which layers arrive -- DLCP's priorities -- shows
// in the iteration time.
#pragma once

#include "api.h"

#include <functional>
#include <vector>

namespace dlcpsim
{

class MessageService
{
  public:
    virtual ~MessageService() = default;
    /** Send `bytes` from host src to host dst now; `on_delivered` runs when the receiver completes it. */
    virtual uint32_t Send(uint32_t src, uint32_t dst, uint64_t bytes, const MessageMeta& meta, uint32_t tag,
                          std::function<void()> on_delivered) = 0;
};

class TrainingJob
{
  public:
    TrainingJob(const JobSpec& spec, MessageService* service);
    void Start();

    const std::vector<double>& IterationEnds() const
    {
        return m_iterEnd;
    }

  private:
    enum class Phase
    {
        FORWARD,
        BACKWARD,
        DONE
    };

    struct Worker
    {
        uint32_t iter = 0;
        int32_t layer = 0;
        Phase phase = Phase::FORWARD;
        bool busy = false;
    };

    size_t Idx(uint32_t iter, uint32_t layer, uint32_t w) const
    {
        return (static_cast<size_t>(iter) * m_layers + layer) * m_workers + w;
    }

    void Advance(uint32_t w);
    void ComputeDone(uint32_t w);
    void GradientReady(uint32_t iter, uint32_t layer, uint32_t w);
    void LayerDone(uint32_t iter, uint32_t layer, uint32_t w);
    void OnPush(uint32_t iter, uint32_t layer);
    void RingSend(uint32_t iter, uint32_t layer, uint32_t w);
    void OnRingStep(uint32_t iter, uint32_t layer, uint32_t w);
    /** Bytes of ``step`` (reduce-scatter, then all-gather) that worker ``w`` sends of ``layer``. */
    uint64_t RingStepBytes(uint32_t layer, uint32_t w, uint32_t step) const;
    MessageMeta Meta(bool first_half, uint32_t layer) const;

    JobSpec m_spec;
    MessageService* m_service;
    uint32_t m_workers;
    uint32_t m_layers;
    std::vector<Worker> m_state;
    std::vector<uint8_t> m_layerDone; // [iter][layer][worker]
    std::vector<uint8_t> m_gradReady;
    std::vector<uint16_t> m_ringSent, m_ringRecv;
    std::vector<uint32_t> m_pushes;   // [iter][layer]
    std::vector<uint64_t> m_doneCount; // per iteration
    std::vector<double> m_iterEnd;
};

} // namespace dlcpsim
