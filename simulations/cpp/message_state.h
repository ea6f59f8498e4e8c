// Receive-side state of one DLCP message and the completion rule of the core
// (dlcp/message.py `Message`, docs/protocol.md section 5). Header-only and free
// of ns-3 so that the shared completion vectors can drive it directly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dlcpsim
{

struct MessageShape
{
    uint64_t num_elems = 0;
    uint32_t elems_per_packet = 1;
    double loss_bound = 0.0;

    uint32_t PktCount() const
    {
        return static_cast<uint32_t>(std::max<uint64_t>(1, (num_elems + elems_per_packet - 1) / elems_per_packet));
    }

    /** int(loss_bound * num_elems), as the Python core computes it (same IEEE product). */
    int64_t MaxMissingElems() const
    {
        return static_cast<int64_t>(loss_bound * static_cast<double>(num_elems));
    }

    uint64_t ElemsOf(uint32_t seq) const
    {
        uint64_t start = static_cast<uint64_t>(seq) * elems_per_packet;
        return start >= num_elems ? 0 : std::min<uint64_t>(elems_per_packet, num_elems - start);
    }
};

enum class Accept
{
    OK = 0,
    DUPLICATE = 1,
    LATE = 2,
    OUT_OF_RANGE = 3,
};

class MessageState
{
  public:
    MessageShape shape;
    std::vector<uint8_t> received;
    std::vector<uint8_t> trimmed;
    uint32_t n_received = 0;
    uint64_t received_elems = 0;
    bool sender_done = false;
    bool done = false;
    int64_t lost_elems = 0;

    MessageState() = default;

    explicit MessageState(const MessageShape& s)
        : shape(s),
          received(s.PktCount(), 0),
          trimmed(s.PktCount(), 0)
    {
    }

    int64_t MissingElems() const
    {
        return static_cast<int64_t>(shape.num_elems) - static_cast<int64_t>(received_elems);
    }

    bool WithinBound() const
    {
        return MissingElems() <= shape.MaxMissingElems();
    }

    /** Complete: everything arrived, or the sender is done and the gap is within the bound. */
    bool Ready() const
    {
        if (n_received == shape.PktCount())
        {
            return true;
        }
        return sender_done && WithinBound();
    }

    uint32_t PacketsBeforeReady() const
    {
        if (sender_done)
        {
            return 1;
        }
        return std::max<uint32_t>(1, shape.PktCount() - n_received);
    }

    /** The sender is done (or trims prove it) and the gap is over the bound. */
    bool NeedsRetransmit() const
    {
        if (sender_done)
        {
            return !WithinBound();
        }
        int64_t known_lost = 0;
        for (size_t i = 0; i < received.size(); ++i)
        {
            known_lost += (trimmed[i] && !received[i]) ? 1 : 0;
        }
        return known_lost * static_cast<int64_t>(shape.elems_per_packet) > shape.MaxMissingElems();
    }

    Accept OnData(uint32_t seq, bool last)
    {
        if (done)
        {
            return Accept::LATE;
        }
        if (seq >= shape.PktCount())
        {
            return Accept::OUT_OF_RANGE;
        }
        if (last)
        {
            sender_done = true;
        }
        if (received[seq])
        {
            return Accept::DUPLICATE;
        }
        received[seq] = 1;
        n_received += 1;
        received_elems += shape.ElemsOf(seq);
        return Accept::OK;
    }

    /** A TRIMMED header: the packet is known lost (its LAST flag still counts). */
    Accept OnTrimmed(uint32_t seq, bool last)
    {
        if (done)
        {
            return Accept::LATE;
        }
        if (seq >= shape.PktCount())
        {
            return Accept::OUT_OF_RANGE;
        }
        if (last)
        {
            sender_done = true;
        }
        trimmed[seq] = 1;
        return Accept::OK;
    }

    void OnProbe()
    {
        sender_done = true;
    }

    /** Marks the message complete (call when Ready()); records the elements accepted as lost. */
    void Finish()
    {
        done = true;
        lost_elems = MissingElems();
    }
};

} // namespace dlcpsim
