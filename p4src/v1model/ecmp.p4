// ECMP next-hop selection, v1model part: the action selector. The actions,
// the table next_hops and apply are common/ecmp_next_hops.p4.
#ifndef DLCP_V1MODEL_ECMP_P4
#define DLCP_V1MODEL_ECMP_P4

control Ecmp(in headers_t hdr, inout local_metadata_t meta) {
    // CRC32, not CRC16: a CRC is linear, so packets that differ only in a few
    // seq bits reach only the members those bits can reach through the low
    // hash bits. With CRC16, BMv2 put seq 0..63 of one flow on 2 of 4 members;
    // with CRC32 on all 4 (vector ecmp_sprays_dlcp_data_only).
    action_selector(HashAlgorithm.crc32, NEXT_HOPS_SIZE, 16) ecmp_selector;

    #include "../common/ecmp_next_hops.p4"
}

#endif  // DLCP_V1MODEL_ECMP_P4
