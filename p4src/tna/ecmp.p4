// ECMP next-hop selection, TNA part: the action selector, built from Tofino's
// Hash, ActionProfile and ActionSelector externs. The actions, the table
// next_hops and apply are common/ecmp_next_hops.p4, as on v1model.
#ifndef DLCP_TNA_ECMP_P4
#define DLCP_TNA_ECMP_P4

control Ecmp(in headers_t hdr, inout local_metadata_t meta) {
    // CRC32 for the same reason as on v1model (see v1model/ecmp.p4).
    Hash<bit<16>>(HashAlgorithm_t.CRC32) ecmp_hash;
    // The profile carries the selector's name: in a TNA P4Info the ActionProfile, not the
    // ActionSelector, is the action profile (with_selector), and one controller
    // drives both targets by the v1model name.
    @name("ecmp_selector") ActionProfile(NEXT_HOPS_SIZE) ecmp_members;
    @name("ecmp_group_selector") ActionSelector(ecmp_members, ecmp_hash, SelectorMode_t.FAIR, ECMP_GROUP_SIZE, ECMP_GROUPS) ecmp_selector;

    #include "../common/ecmp_next_hops.p4"
}

#endif  // DLCP_TNA_ECMP_P4
