// The DLCP queue disc: the switch behaviour of p4src/ on an ns-3 egress port.
//
//   * Classification by the switch's DlcpSwitchConfig (switch_config.h), as
//     p4src/common/classification.p4 classifies.
//   * Selective drop and trimming (selective_drop.p4, trimming.p4): an eligible
//     packet that finds more than the (queue, drop class) threshold of packets
//     in its queue is dropped, or cut to its headers and sent in TRIM_QUEUE.
//   * Strict priority over the NUM_PRIORITY_CLASSES queues, a shared buffer of
//     MaxSize packets, and counters per class.
//   * The buffer policy of DLCP's software switch (testbed/switch/egress.c;
//     docs/protocol.md, "Switch buffer"): a packet that finds the buffer full
//     pushes out the newest packet of the lowest non-empty class below its own
//     (counted `pushed_out` for that class), as many times as it needs room; with
//     no lower class queued it is dropped (`overflow`). So under overload a
//     higher class keeps its share of the buffer as it keeps its share of the
//     link, and control packets and retransmissions (class 7) are never lost to
//     data. BufferPolicy "tail_drop" (a plain shared buffer) is kept for comparison.
//   * Optional ECN marking (not in the P4 program; a commodity-switch feature):
//     an ECN-capable packet finding EcnThreshold or more packets in its queue is
//     marked CE, so DCTCP background traffic behaves as on a DCTCP fabric.
#pragma once

#include "switch_config.h"

#include "ns3/queue.h"
#include "ns3/queue-disc.h"

#include <cstdint>
#include <unordered_set>

namespace dlcpsim
{

/** A FIFO class queue (as DropTailQueue) that can also give up its newest packet (push-out). */
class ClassQueue : public ns3::Queue<ns3::QueueDiscItem>
{
  public:
    static ns3::TypeId GetTypeId();
    bool Enqueue(ns3::Ptr<ns3::QueueDiscItem> item) override;
    ns3::Ptr<ns3::QueueDiscItem> Dequeue() override;
    ns3::Ptr<ns3::QueueDiscItem> Remove() override;
    ns3::Ptr<const ns3::QueueDiscItem> Peek() const override;
    /** Removes the newest packet; the queue disc counts it as dropped after dequeue. */
    ns3::Ptr<ns3::QueueDiscItem> RemoveNewest();
};

class DlcpQueueDisc : public ns3::QueueDisc
{
  public:
    static ns3::TypeId GetTypeId();
    DlcpQueueDisc();
    ~DlcpQueueDisc() override;

    void SetConfig(const DlcpSwitchConfig* config)
    {
        m_config = config;
    }

    const ClassCounters& Counters() const
    {
        return m_counters;
    }

    /** The queue the last enqueued item went to (for tests); -1 if it was dropped. */
    int32_t LastQueue() const
    {
        return m_lastQueue;
    }

    /** The queue of the last dequeued item (for tests). */
    int32_t LastDequeuedQueue() const
    {
        return m_lastDequeued;
    }

  private:
    bool DoEnqueue(ns3::Ptr<ns3::QueueDiscItem> item) override;
    ns3::Ptr<ns3::QueueDiscItem> DoDequeue() override;
    ns3::Ptr<const ns3::QueueDiscItem> DoPeek() override;
    bool CheckConfig() override;
    void InitializeParams() override;
    bool Admit(ns3::Ptr<ns3::QueueDiscItem> item, uint32_t queue);
    /** Push out the newest packet of the lowest non-empty class below `queue`; false if none. */
    bool PushOut(uint32_t queue);
    ns3::Ptr<ns3::QueueDiscItem> Trim(ns3::Ptr<ns3::QueueDiscItem> item);

    const DlcpSwitchConfig* m_config = nullptr;
    ClassCounters m_counters;
    int32_t m_lastQueue = -1;
    int32_t m_lastDequeued = -1;
    std::unordered_set<uint64_t> m_toTrim; // packet uids to cut to their headers as they leave TRIM_QUEUE
};

} // namespace dlcpsim
