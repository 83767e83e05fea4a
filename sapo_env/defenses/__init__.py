"""What the env does with packets from nodes it cannot trust: the packet schema every shared
group is parsed against (``packet_schema``), re-scoring and verification of what a packet
claims (``packets``), per-source reputation for sampling (``reputation``), and the transport
attacks these defenses are tested against (``transport_attacks``)."""
