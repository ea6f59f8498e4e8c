// The messages of a run (SimulationImpl as jobs.h's MessageService): each one's FlowRecord,
// and its launch over DLCP (the two hosts' transports) or TCP (the pair's persistent connection).
#include "simulation_impl.h"

#include "ns3/simulator.h"

#include <stdexcept>
#include <utility>

namespace dlcpsim
{

using namespace ns3;

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

} // namespace dlcpsim
