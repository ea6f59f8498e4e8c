// DLCP header access by the generated offsets (dlcp_constants.h), and the header
// as an ns-3 Header so applications can prepend it to a (virtual) payload.
#pragma once

#include "dlcp_constants.h"

#include "ns3/header.h"

#include <cstdint>
#include <cstring>

namespace dlcpsim
{

/** The IP numbers the simulator's own code reads (ns-3 names them only inside its protocol classes). */
static constexpr uint8_t IPPROTO_TCP = 6;
static constexpr uint8_t IPPROTO_UDP = 17;
static constexpr uint16_t IPV4_ETHERTYPE = 0x0800;

inline uint32_t
GetField(const uint8_t* h, uint32_t off, uint32_t size)
{
    uint32_t v = 0;
    for (uint32_t i = 0; i < size; ++i)
    {
        v = (v << 8) | h[off + i];
    }
    return v;
}

inline void
SetField(uint8_t* h, uint32_t off, uint32_t size, uint32_t v)
{
    for (uint32_t i = size; i-- > 0;)
    {
        h[off + i] = static_cast<uint8_t>(v & 0xff);
        v >>= 8;
    }
}

inline uint8_t
PacketTypeOf(const uint8_t* h)
{
    return h[DLCP_OFF_VER_TYPE] & 0x0f;
}

inline uint8_t
VersionOf(const uint8_t* h)
{
    return h[DLCP_OFF_VER_TYPE] >> 4;
}

/** The 40-byte DLCP header, serialized exactly as on the wire. */
class DlcpHeader : public ns3::Header
{
  public:
    uint8_t bytes[DLCP_HEADER_BYTES] = {};

    static ns3::TypeId GetTypeId();
    ns3::TypeId GetInstanceTypeId() const override;
    void Print(std::ostream& os) const override;
    uint32_t GetSerializedSize() const override;
    void Serialize(ns3::Buffer::Iterator start) const override;
    uint32_t Deserialize(ns3::Buffer::Iterator start) override;

    uint32_t Get(uint32_t off, uint32_t size) const
    {
        return GetField(bytes, off, size);
    }

    void Set(uint32_t off, uint32_t size, uint32_t v)
    {
        SetField(bytes, off, size, v);
    }

    void SetType(uint8_t type)
    {
        bytes[DLCP_OFF_VER_TYPE] = static_cast<uint8_t>((DLCP_VERSION << 4) | (type & 0x0f));
    }
};

} // namespace dlcpsim
